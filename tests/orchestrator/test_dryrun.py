"""The policy dry run: a hand-built history replayed under the current and a proposed table,
figures checked by hand; the sample above the bound is labelled; the endpoint's envelope."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from orchestrator.analytics import dryrun
from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import RoutingPolicy, Run

TIMEOUT_ROW = dict(
    max_attempts=3,
    base_delay=2.0,
    max_delay=60.0,
    multiplier=3.0,
    jitter="none",
    action_when_exhausted="switch_source",
    hard_fail=False,
)


def _set_row(ftype: str, **fields) -> None:
    row = RoutingPolicy.objects.get(failure_type=ftype)
    for k, v in fields.items():
        setattr(row, k, v)
    save_policy_change(row, actor=None, note="test")


def _run(**fields) -> Run:
    defaults = dict(agent="researcher", source="web_search", status=Run.Status.SUCCEEDED)
    return Run.objects.create(**{**defaults, **fields})


def _fail(decision: str, **fields) -> Run:
    fields.setdefault("failure_type", "timeout")
    return _run(status=Run.Status.FAILED, decision=decision, **fields)


@pytest.fixture
def history(db):
    """Three timeout tasks on web_search and one invalid request, in the window:

    A: fails, retried, the retry succeeds.
    B: fails, retried, fails again, retried again, succeeds.
    C: fails, retried, fails again, switched to news_api, which succeeds.
    X: an invalid request, aborted. And one old failure, outside the window.
    """
    _set_row("timeout", **TIMEOUT_ROW)
    _set_row("invalid_input", max_attempts=1, hard_fail=True, action_when_exhausted="abort")
    a1 = _fail("retry")
    _run(retry_of=a1, attempt=2)
    b1 = _fail("retry")
    _fail("retry", retry_of=b1, attempt=2)
    _run(retry_of=b1, attempt=3)
    c1 = _fail("retry")
    c2 = _fail("switch_source", retry_of=c1, attempt=2, switch_to="news_api")
    _run(source="news_api", switched_from=c2)
    _fail("abort", failure_type="invalid_input", retryable=False)
    _fail("retry", created_at=timezone.now() - timedelta(days=10))


def test_it_reads_the_windows_failures_and_what_followed_each_decision(history):
    h = dryrun.load_history(7)
    assert h.failures == 6 and not h.sampled
    # Retries recorded: A1→ok, B1→failed, B2→ok, C1→failed; the one switch (C2) succeeded.
    assert h.outcomes[("retry", "timeout", "web_search")] == (4, 2)
    assert h.outcomes[("switch_source", "timeout", "web_search")] == (1, 1)
    assert h.switchable() == {"web_search"}


def test_it_compares_the_proposed_table_with_the_current_one_by_hand(history):
    result = dryrun.dry_run([{"failure_type": "timeout", "max_attempts": 2}], days=7)
    current, proposed = result["current"], result["proposed"]
    # Current: the three first attempts wait 2 s, the two second ones 2 * 3 = 6 s; all retried,
    # each recovering at the recorded 2 of 4.
    assert current["retries"] == 5
    assert current["waiting_seconds"] == 3 * 2 + 2 * 6
    assert current["switches"] == 0 and current["escalations"] == 0
    assert current["aborts"] == 1
    assert current["expected_recovered"] == 2.5 and current["expected_wasted_calls"] == 2.5
    # Proposed (2 attempts): the second attempts are switched (web_search has an alternative),
    # and the recorded switch worked every time.
    assert proposed["retries"] == 3 and proposed["waiting_seconds"] == 6
    assert proposed["switches"] == 2
    assert proposed["expected_recovered"] == 1.5 + 2 and proposed["expected_wasted_calls"] == 1.5
    assert result["difference"]["retries"] == -2
    assert result["difference"]["waiting_seconds"] == -12
    assert result["difference"]["expected_recovered"] == 1.0
    assert result["failures"] == 6 and result["sampled"] is False


def test_escalations_are_counted_as_review_load_per_day(history):
    result = dryrun.dry_run(
        [{"failure_type": "timeout", "max_attempts": 1, "action_when_exhausted": "escalate"}],
        days=2,
    )
    assert result["proposed"]["escalations"] == 5
    assert result["proposed"]["escalations_per_day"] == 2.5
    assert result["proposed"]["retries"] == 0


def test_above_the_bound_a_sample_is_replayed_and_labelled(history, monkeypatch):
    # Ids modulo 4 below 2: of the six failures' consecutive-ish ids (offsets 0, 2, 3, 5, 6, 8)
    # any two neighbouring residues hold three, wherever the sequence starts.
    monkeypatch.setattr(dryrun, "SAMPLE_ABOVE", 2)
    monkeypatch.setattr(dryrun, "SAMPLE_BUCKETS", 4)
    result = dryrun.dry_run([], days=7)
    assert result["sampled"] is True
    assert result["sample_size"] == 3 and result["failures"] == 6
    assert result["current"]["failures"] == 6  # scaled back up


def test_the_replay_is_pure_and_reads_no_database():
    h = dryrun.History(
        since=timezone.now(),
        until=timezone.now(),
        days=1,
        failures=10,
        read=10,
        fraction=1.0,
        groups={dryrun.FailureKey("rate_limited", "s", 1, True, 30.0, False, "retry"): 10},
        outcomes={("retry", "rate_limited", "s"): (10, 9)},
    )
    from orchestrator.coordination.routing import DEFAULT_RULES, PolicySnapshot

    snap = PolicySnapshot.from_rows(1, [{"failure_type": k, **v} for k, v in DEFAULT_RULES.items()])
    figures = dryrun.replay(h, snap)
    # Never sooner than the Retry-After: 30 s each.
    assert figures.retries == 10 and figures.waiting_seconds == 300
    assert round(figures.expected_recovered, 6) == 9


def test_the_endpoint_answers_the_comparison(client, auth_headers, history):
    body = {"days": 7, "policies": [{"failure_type": "timeout", "max_attempts": 2}]}
    response = client.post(
        "/api/v1/policies/dry-run", body, content_type="application/json", **auth_headers
    )
    assert response.status_code == 200, response.content
    assert response.json()["difference"]["switches"] == 2
    # Nothing was saved.
    assert RoutingPolicy.objects.get(failure_type="timeout").max_attempts == 3


def test_the_endpoint_refuses_an_invalid_row_in_the_envelope(client, auth_headers, db):
    body = {"policies": [{"failure_type": "timeout", "base_delay": 10, "max_delay": 1}]}
    response = client.post(
        "/api/v1/policies/dry-run", body, content_type="application/json", **auth_headers
    )
    assert response.status_code == 422
    payload = response.json()
    assert payload["failure_type"] == "invalid_input"
    assert payload["errors"][0]["path"] == "policies.0.max_delay"


def test_the_endpoint_needs_a_token(client, db):
    response = client.post("/api/v1/policies/dry-run", {}, content_type="application/json")
    assert response.status_code == 401 and response.json()["status"] == "error"
