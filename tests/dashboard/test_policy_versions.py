"""Policy versions: every edit kept whole, listed with its diff, restored as a new version
(audited with a note), on the page and over the API; the edit form's dry run."""

from __future__ import annotations

from django.urls import reverse

from orchestrator.coordination.actions import do_restore_policy_version
from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import (
    AuditEntry,
    PolicyState,
    PolicyVersion,
    ProviderOverride,
    RoutingPolicy,
    Run,
)
from orchestrator.vocabulary import Channel

from .conftest import make_failure
from .test_policies import HX, POLICIES, form_of, timeout_policy


def _edit_timeout(attempts: int, note: str = "") -> int:
    policy = timeout_policy()
    policy.max_attempts = attempts
    return save_policy_change(policy, actor=None, note=note)


def test_every_edit_keeps_the_whole_table_at_its_version(db):
    first = _edit_timeout(5, "five")
    override = ProviderOverride(
        provider="groq", match_on="status_code", match_value="498", failure_type="auth_failure"
    )
    second = save_policy_change(override, actor=None)
    v1, v2 = PolicyVersion.objects.get(version=first), PolicyVersion.objects.get(version=second)
    assert v1.rules_by_type()["timeout"]["max_attempts"] == 5
    assert ("groq", "status_code", "498") not in v1.overrides_by_match()
    assert v2.changes_since(v1) == [
        {"what": "override groq:status_code:498", "before": None, "after": override.snapshot()}
    ]


def test_restoring_version_n_makes_version_n_plus_one_equal_to_n(policy_editor, db):
    kept = _edit_timeout(5)
    _edit_timeout(2)
    save_policy_change(
        ProviderOverride(
            provider="x", match_on="status_code", match_value="420", failure_type="rate_limited"
        ),
        actor=None,
    )
    latest = PolicyState.current_version()
    restored = do_restore_policy_version(
        kept, policy_editor, channel=Channel.DASHBOARD, note="2 attempts was worse"
    )
    assert restored.version == latest + 1 == PolicyState.current_version()
    assert restored.restored_from == kept
    assert restored.policies == PolicyVersion.objects.get(version=kept).policies
    assert restored.overrides == PolicyVersion.objects.get(version=kept).overrides
    assert timeout_policy().max_attempts == 5
    assert not ProviderOverride.objects.filter(provider="x").exists()
    entry = AuditEntry.objects.get(action="policyversion.restore")
    assert entry.note == "2 attempts was worse" and entry.actor_label == "paul"
    assert entry.after == {"version": restored.version, "restored_from": kept}


def test_the_page_lists_versions_with_diffs_and_restores_one(editor_client):
    kept = _edit_timeout(5)
    _edit_timeout(2)
    html = editor_client.get(POLICIES).content.decode()
    assert f'id="version-{kept}"' in html
    assert "timeout.max_attempts" in html
    assert f"Restore version {kept}" in html
    response = editor_client.post(
        reverse("dashboard:policy_restore", args=[kept]), {"note": "back to five", "confirm": "yes"}
    )
    assert response.status_code == 302 and response["Location"].endswith("#versions")
    assert timeout_policy().max_attempts == 5
    assert PolicyVersion.objects.newest_first().first().note == "back to five"


def test_restoring_an_unknown_version_is_a_404(editor_client):
    response = editor_client.post(reverse("dashboard:policy_restore", args=[99999]))
    assert response.status_code == 404


def test_the_api_lists_versions_newest_first_with_changes(client, auth_headers):
    kept = _edit_timeout(5)
    latest = _edit_timeout(2)
    body = client.get("/api/v1/policies/versions?limit=1", **auth_headers).json()
    (item,) = body["items"]
    assert item["version"] == latest
    assert {"what": "timeout.max_attempts", "before": 5, "after": 2} in item["changes"]
    assert body["next_before"] == latest
    older = client.get(f"/api/v1/policies/versions?before={latest}", **auth_headers).json()
    assert older["items"][0]["version"] == kept


def test_the_versions_endpoint_needs_a_token(client, db):
    response = client.get("/api/v1/policies/versions")
    assert response.status_code == 401 and response.json()["failure_type"] == "auth_failure"


def test_the_edit_form_dry_runs_the_proposal_without_saving(editor_client):
    policy = timeout_policy()
    for _ in range(3):
        make_failure("timeout", decision="retry", attempt=1)
    url = reverse("dashboard:policy_dry_run", args=[policy.pk])
    data = form_of(policy, max_attempts=1, action_when_exhausted="escalate", days="7")
    fragment = editor_client.post(url, data, **HX).content.decode()
    assert "<html" not in fragment
    assert "Dry run" in fragment and "Review load per day" in fragment
    assert "over 3 failures" in fragment
    assert RoutingPolicy.objects.get(pk=policy.pk).max_attempts == policy.max_attempts
    page = editor_client.post(url, data).content.decode()  # without htmx: the whole page
    assert "<html" in page and "dry-run-table" in page and 'class="editing"' in page
    assert Run.objects.count() == 3


def test_the_dry_run_of_an_invalid_form_says_to_fix_it(editor_client):
    policy = timeout_policy()
    url = reverse("dashboard:policy_dry_run", args=[policy.pk])
    fragment = editor_client.post(url, form_of(policy, base_delay=50, max_delay=1), **HX)
    assert "Fix the form" in fragment.content.decode()


def test_the_migration_rebuilds_the_versions_the_audit_trail_accounts_for(db):
    import importlib

    from django.apps import apps

    migration = importlib.import_module("orchestrator.migrations.0014_issue16_analytics")
    first = _edit_timeout(5)
    override = ProviderOverride(
        provider="groq", match_on="status_code", match_value="498", failure_type="auth_failure"
    )
    second = save_policy_change(override, actor=None)
    third = _edit_timeout(2)
    # The migration knows the fields a rule had then; fields added since are not in its rows.
    then = migration.RULE_FIELDS
    kept = {
        v.version: ([{k: p[k] for k in then} for p in v.policies], v.overrides)
        for v in PolicyVersion.objects.all()
    }
    PolicyVersion.objects.all().delete()
    migration.backfill_versions(apps, None)
    rebuilt = {v.version: (v.policies, v.overrides) for v in PolicyVersion.objects.all()}
    for version in (first, second, third, first - 1):
        assert rebuilt[version] == kept[version], version


def test_a_page_before_the_first_version_is_empty_not_an_error(client, auth_headers):
    response = client.get("/api/v1/policies/versions?before=1", **auth_headers)
    assert response.status_code == 200
    assert response.json() == {"items": [], "next_before": None}


def _version_before_over_budget_action() -> PolicyVersion:
    """A version kept before rules had `over_budget_action` (as the 0014 backfill wrote v1):
    its rows have no such key."""
    number = PolicyState.current_version()
    version = PolicyVersion.objects.get(version=number)
    version.policies = [
        {k: v for k, v in row.items() if k != "over_budget_action"} for row in version.policies
    ]
    version.save()
    return version


def test_a_field_a_version_predates_is_not_listed_as_changed(db):
    old = _version_before_over_budget_action()
    edited = PolicyVersion.objects.get(version=_edit_timeout(5))
    assert edited.changes_since(old) == [
        {
            "what": "timeout.max_attempts",
            "before": old.rules_by_type()["timeout"]["max_attempts"],
            "after": 5,
        }
    ]


def test_restoring_a_version_that_predates_a_field_writes_its_default_back(policy_editor, db):
    old = _version_before_over_budget_action()
    policy = timeout_policy()
    policy.over_budget_action = "abort"
    save_policy_change(policy, actor=None)
    restored = do_restore_policy_version(old.version, policy_editor, channel=Channel.DASHBOARD)
    # Every row had the field's default when the field was added: "= v1" is then true.
    assert timeout_policy().over_budget_action == "escalate"
    assert restored.changes_since(old) == []


def test_restoring_asks_for_confirmation_first(editor_client):
    kept = _edit_timeout(5)
    _edit_timeout(2)
    url = reverse("dashboard:policy_restore", args=[kept])
    page = editor_client.get(POLICIES).content.decode()
    assert f'action="{url}"' not in page  # no one-click restore form in the table
    assert f'href="{url}"' in page
    confirm = editor_client.get(url).content.decode()
    assert "timeout.max_attempts" in confirm and "Confirm restore" in confirm
    assert timeout_policy().max_attempts == 2
    unconfirmed = editor_client.post(url, {"note": "no confirm"})
    assert unconfirmed.status_code == 302 and unconfirmed["Location"] == url
    assert timeout_policy().max_attempts == 2
    done = editor_client.post(url, {"note": "back", "confirm": "yes"})
    assert done.status_code == 302 and timeout_policy().max_attempts == 5
