"""GET /policies: every routing policy and the enabled overrides, with the policy version."""

from __future__ import annotations

from classifier import FailureCategory
from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import PolicyState, ProviderOverride


def test_it_lists_one_policy_per_failure_type_with_the_version(client, auth_headers):
    body = client.get("/api/v1/policies", **auth_headers).json()
    assert body["version"] == PolicyState.current_version()
    assert {p["failure_type"] for p in body["policies"]} == {c.value for c in FailureCategory}
    assert set(body["policies"][0]) == {
        "failure_type",
        "max_attempts",
        "base_delay",
        "max_delay",
        "multiplier",
        "jitter",
        "action_when_exhausted",
        "hard_fail",
        "review_deadline",
        "review_fallback",
        "over_budget_action",
        "refresh_credentials",
    }


def test_it_lists_enabled_overrides_only_and_follows_the_version(client, auth_headers):
    before = client.get("/api/v1/policies", **auth_headers).json()["version"]
    enabled = ProviderOverride(
        provider="groq", match_on="status_code", match_value="498", failure_type="auth_failure"
    )
    disabled = ProviderOverride(
        provider="x", match_on="status_code", match_value="420", failure_type="rate_limited"
    )
    disabled.enabled = False
    save_policy_change(enabled, actor=None)
    save_policy_change(disabled, actor=None)

    body = client.get("/api/v1/policies", **auth_headers).json()
    assert body["version"] > before
    assert enabled.snapshot() in body["overrides"]
    assert disabled.snapshot() | {"enabled": True} not in body["overrides"]
    assert all(override["enabled"] for override in body["overrides"])
    assert len(body["overrides"]) == ProviderOverride.objects.filter(enabled=True).count()
