"""The coordinator's state machine, driven in-process with a simulated clock (no worker).

These call the same functions the Celery tasks call; tests/orchestrator/test_worker.py repeats the
important paths with a real worker process.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from orchestrator.coordination import (
    actions,
    budget,
    dispatch,
    execution,
    registry,
    review,
    workflow,
)
from orchestrator.coordination.actions import do_resolve_review
from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.coordination.simulation import drive, simulated
from orchestrator.models import (
    AuditEntry,
    ProviderOverride,
    ReviewItem,
    Run,
    SourceHealth,
    Workflow,
)
from orchestrator.vocabulary import Channel

START = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def sim(db, django_capture_on_commit_callbacks):
    with simulated(START) as (clock, disp):

        def run() -> int:
            return drive(
                clock, disp, commit=lambda: django_capture_on_commit_callbacks(execute=True)
            )

        def start(topics, faults, capability="news", breadth=1) -> Workflow:
            with django_capture_on_commit_callbacks(execute=True):
                wf = workflow.start_workflow(
                    "AI impact", topics, capability, breadth=breadth, input={"faults": faults}
                )
            return wf

        def committed():
            return django_capture_on_commit_callbacks(execute=True)

        yield SimpleNamespace(clock=clock, disp=disp, drive=run, start=start, commit=committed)


def runs_of(wf: Workflow, topic: str) -> list[Run]:
    return list(wf.runs.filter(topic=topic).order_by("pk"))


def test_a_mixed_workflow_degrades_with_honest_coverage(sim, operator):
    wf = sim.start(
        ["film", "music", "games", "books"],
        {
            "news_api:film": "ok:3",
            "news_wire:film": "ok:2",
            "news_api:music": ["timeout", "ok:2"],
            "news_wire:music": "missing",
            "news_archive:music": "empty",
            "news_api:games": "missing",
            "news_wire:games": "missing",
            "news_archive:games": "auth",
            "news_api:books": ["rate_limited:3", "ok:1"],
            "news_wire:books": "partial:2:invalid",
        },
        breadth=2,
    )
    sim.drive()
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.AWAITING_REVIEW
    item = ReviewItem.objects.get(workflow=wf)
    assert item.run.source == "news_archive" and item.failure_type == "auth_failure"
    with sim.commit():
        assert (
            do_resolve_review(
                item, operator, "accept_partial", channel=Channel.DASHBOARD, note="rotating keys"
            )
            == 1
        )
    sim.drive()
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.DEGRADED
    cov = wf.coverage
    assert cov["film"]["verdict"] == "well_supported"
    assert cov["music"]["verdict"] == "thin"
    assert cov["music"]["failures"][0]["failure_types"] == ["resource_missing"]
    assert cov["games"]["verdict"] == "gap"
    assert "auth_failure" in cov["games"]["why"] and "resource_missing" in cov["games"]["why"]
    # 1 result, and 2 partial results of a failed call: one source of support, so thin.
    assert cov["books"]["verdict"] == "thin"
    assert cov["books"]["partial_results"] == 2
    assert "gaps: games" in wf.coverage_summary


def test_a_timeout_is_retried_locally_then_by_the_coordinator(sim):
    wf = sim.start(["music"], {"news_api:music": ["timeout", "ok:2"]})
    sim.drive()
    first, second = runs_of(wf, "music")
    assert first.calls == 3  # one call and two quick local retries
    assert first.decision == "retry" and first.failure_type == "timeout"
    assert (second.attempt, second.retry_of_id, second.status) == (2, first.pk, "succeeded")
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.SUCCEEDED
    assert wf.coverage["music"]["verdict"] == "thin"


def test_a_rate_limited_retry_waits_for_retry_after(sim):
    wf = sim.start(["books"], {"news_api:books": ["rate_limited:3", "ok:1"]})
    sim.drive()
    first, second = runs_of(wf, "books")
    assert first.retry_after == 3.0
    assert "Retry-After of 3.0 s" in first.decision_reason
    assert second.due_at - first.finished_at >= timedelta(seconds=3)
    assert second.started_at >= first.finished_at + timedelta(seconds=3)


def test_a_provider_retry_after_holds_back_every_caller_of_that_source(sim):
    sim.start(["a", "b"], {"news_api:a": ["rate_limited:4", "ok"], "news_api:b": "ok"})
    health = budget.health("news_api")
    assert health.not_before is None
    sim.drive()
    health.refresh_from_db()
    assert health.not_before is not None
    calls = Run.objects.filter(source="news_api").order_by("started_at")
    limited = calls.get(topic="a", attempt=1)
    for run in calls.exclude(pk=limited.pk):
        assert run.started_at < limited.finished_at or run.started_at >= health.not_before


def test_every_source_failing_fails_the_workflow(sim):
    wf = sim.start(
        ["film"],
        {"news_api:film": "missing", "news_wire:film": "missing", "news_archive:film": "invalid"},
    )
    sim.drive()
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.FAILED
    assert wf.coverage["film"]["verdict"] == "gap"
    runs = runs_of(wf, "film")
    assert [r.source for r in runs] == ["news_api", "news_wire", "news_archive"]
    # Each switch records the failed run it came from (the overview's "switched" tiles).
    assert [r.switched_from_id for r in runs] == [None, runs[0].pk, runs[1].pk]


def test_a_valid_empty_result_is_a_success_not_a_gap(sim):
    wf = sim.start(["poetry"], {"news_api:poetry": "empty"})
    sim.drive()
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.SUCCEEDED
    assert wf.coverage["poetry"]["verdict"] == "empty"
    assert runs_of(wf, "poetry")[0].calls == 1


def test_auth_failure_with_a_refresher_is_retried_once_after_refreshing(sim):
    wf = sim.start(["film"], {"news_api:film": "auth_refreshable"})
    sim.drive()
    first, second = runs_of(wf, "film")
    assert first.decision == "retry" and "refreshing its credentials" in first.decision_reason
    assert second.status == "succeeded"
    # The 401 said a retry cannot help; the refresh changed the request, so it is not futile.
    assert first.retryable is False
    assert not Run.objects.futile_retries().exists()


def test_a_refresh_spent_on_a_key_no_refresh_cures_is_not_left_for_a_later_task(sim):
    spent = sim.start(["poetry"], {"news_api:poetry": "auth"})
    sim.drive()
    refreshed, retried = runs_of(spent, "poetry")[:2]
    assert refreshed.decision_refresh and retried.failure_type == "auth_failure"
    wf = sim.start(["film"], {"news_api:film": "auth_refreshable"})
    sim.drive()
    first, second = runs_of(wf, "film")
    assert first.status == "failed" and first.decision_refresh
    assert second.status == "succeeded"


def test_a_501_classified_non_retryable_is_never_retried_by_the_coordinator(sim):
    wf = sim.start(["film"], {"news_api:film": "server_fault:501", "news_wire:film": "ok:2"})
    sim.drive()
    first, switched = runs_of(wf, "film")
    assert (first.failure_type, first.status_code, first.retryable) == ("server_fault", 501, False)
    assert first.signal == "status"
    assert first.decision == "switch_source"
    assert "the provider says a retry cannot help" in first.decision_reason
    assert "news_wire is tried next" in first.decision_reason
    assert (switched.source, switched.switched_from_id) == ("news_wire", first.pk)
    assert not Run.objects.filter(retry_of=first).exists()
    assert not Run.objects.futile_retries().exists()


def test_an_override_saying_no_retry_is_honoured_and_named(sim, policy_editor):
    override = ProviderOverride(
        provider="news_api",
        match_on="status_code",
        match_value="503",
        failure_type="server_fault",
        retryable=False,
    )
    save_policy_change(override, policy_editor)
    wf = sim.start(["film"], {"news_api:film": "server_fault:503"})
    sim.drive()
    first = runs_of(wf, "film")[0]
    assert (first.failure_type, first.retryable, first.decision) == (
        "server_fault",
        False,
        "switch_source",
    )
    assert "a provider override says a retry cannot help" in first.decision_reason


def test_an_alternative_the_run_suggested_is_used_when_the_capability_has_none_left(
    sim, client, auth_headers, api_token
):
    # Started by the agent's token (POST /workflows), which reports into it.
    wf = Workflow.objects.create(name="film", topics=["film"], capability="web", token=api_token[0])
    tried = Run.objects.create(
        workflow=wf,
        topic="film",
        capability="web",
        agent="a",
        source="web_search",
        status=Run.Status.FAILED,
        failure_type="resource_missing",
        decision="switch_source",
    )
    report = {
        "status": "error",
        "failure_type": "not_found",
        "agent": "web-agent",
        "source": "web_archive",
        "workflow": wf.pk,
        "topic": "film",
        "capability": "web",
        "alternatives_suggested": ["use scholar_api instead of web_archive", "web_search"],
    }
    response = client.post("/api/v1/runs", report, content_type="application/json", **auth_headers)
    assert response.status_code == 201, response.content
    with sim.commit():
        workflow.step(wf.pk)
    reported = Run.objects.get(pk=response.json()["id"])
    assert reported.decision == "switch_source"
    assert "scholar_api, which the agent suggested, is tried next" in reported.decision_reason
    nxt = Run.objects.get(workflow=wf, source="scholar_api")
    assert nxt.switched_from_id == reported.pk and nxt.is_pending  # queued, then dispatched
    assert tried.pk != nxt.pk


def test_a_run_an_agent_reported_is_said_to_be_the_agents_word(
    sim, client, auth_headers, api_token
):
    wf = Workflow.objects.create(name="x", topics=["film"], capability="news", token=api_token[0])
    report = {
        "status": "error",
        "failure_type": "server_error",
        "retry_recommended": False,
        "agent": "news-agent",
        "source": "news_api",
        "workflow": wf.pk,
        "topic": "film",
        "capability": "news",
    }
    response = client.post("/api/v1/runs", report, content_type="application/json", **auth_headers)
    run = Run.objects.get(pk=response.json()["id"])
    decision = workflow.decide_for(wf, run)
    assert decision.action == "switch_source"
    assert "the agent says a retry cannot help" in decision.reason


def test_unclassified_is_retried_once_then_escalated_with_its_raw_detail(sim):
    wf = sim.start(["film"], {"news_api:film": "weird"})
    sim.drive()
    first, second = runs_of(wf, "film")
    assert (first.decision, second.decision) == ("retry", "escalate")
    item = ReviewItem.objects.get(run=second)
    assert "flux capacitor" in item.reason
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.AWAITING_REVIEW


def test_steps_and_task_redeliveries_are_idempotent(sim):
    wf = sim.start(["film", "music"], {})
    workflow.step(wf.pk)
    workflow.step(wf.pk)
    assert wf.runs.count() == 2
    sim.drive()
    run = wf.runs.first()
    assert execution.execute_run(run.pk) == "skipped"
    workflow.step(wf.pk)
    assert wf.runs.count() == 2


def test_a_poison_task_is_parked_and_escalated(sim, settings):
    wf = sim.start(["film"], {})
    workflow.step(wf.pk)
    run = wf.runs.get()
    Run.objects.filter(pk=run.pk).update(
        status="running", deliveries=settings.RUN_MAX_DELIVERIES, dispatched_at=START
    )
    sim.disp.runs.clear()
    assert execution.execute_run(run.pk) == "parked"
    sim.drive()
    run.refresh_from_db()
    assert run.status == "escalated" and run.decision == "escalate"
    assert f"its worker died {settings.RUN_MAX_DELIVERIES} times" in run.detail
    assert run.exception_type == "WorkerLostError" and run.calls == 0  # never called again
    item = ReviewItem.objects.get(run=run)
    assert f"its worker died {settings.RUN_MAX_DELIVERIES} times" in item.reason


def test_concurrent_resolutions_have_one_winner_and_continue_once(sim, operator, policy_editor):
    wf = sim.start(["film"], {"news_api:film": "missing", "news_wire:film": ["auth", "ok"]})
    sim.drive()
    item = ReviewItem.objects.get()
    assert item.claim(operator) is True
    assert item.claim(policy_editor) is False
    with sim.commit():
        assert do_resolve_review(item, operator, "retry", channel=Channel.DASHBOARD) == 1
        assert do_resolve_review(item, policy_editor, "abort", channel=Channel.DASHBOARD) == 0
    sim.disp.steps.append((wf.pk, item.pk))  # a duplicated continuation message
    sim.drive()
    assert Run.objects.filter(retry_of=item.run).count() == 1
    assert AuditEntry.objects.filter(action="review.resolve", object_id=str(item.pk)).count() == 1
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.SUCCEEDED


def test_a_resolution_whose_step_is_late_is_not_lost_when_another_settles_the_workflow(
    sim, operator
):
    faults = {"news_api:film": "missing", "news_wire:film": ["auth", "ok"]}
    faults |= {"news_api:music": "missing", "news_wire:music": ["auth", "ok"]}
    wf = sim.start(["film", "music"], faults)
    sim.drive()
    late, prompt = sorted(ReviewItem.objects.filter(workflow=wf), key=lambda i: i.run.topic)
    # The late item's continuation message is never sent (its on-commit hook is not run here):
    # the prompt item's steps must apply it rather than settle the workflow around it.
    assert do_resolve_review(late, operator, "retry", channel=Channel.DASHBOARD) == 1
    with sim.commit():
        assert do_resolve_review(prompt, operator, "retry", channel=Channel.DASHBOARD) == 1
    sim.drive()
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.SUCCEEDED, wf.coverage_summary
    for item in (late, prompt):
        item.refresh_from_db()
        assert item.continued_at is not None
        assert Run.objects.get(retry_of=item.run).status == Run.Status.SUCCEEDED


def test_a_resolved_item_not_yet_applied_keeps_the_workflow_from_settling(sim, operator):
    wf = sim.start(["film"], {"news_api:film": "missing", "news_wire:film": ["auth", "ok"]})
    sim.drive()
    item = ReviewItem.objects.get(workflow=wf)
    # As if the resolution committed after a step had read the unapplied ones.
    ReviewItem.objects.filter(pk=item.pk).update(
        state=ReviewItem.State.RESOLVED, resolution="retry", resolved_by=operator
    )
    workflow._settle(Workflow.objects.get(pk=wf.pk))
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.AWAITING_REVIEW and wf.finished_at is None


def test_one_decision_resolves_a_group_with_the_same_signature(sim, operator):
    faults = {f"news_api:{t}": "auth" for t in ("film", "music", "games")}
    faults |= {f"news_wire:{t}": "missing" for t in ("film", "music", "games")}
    faults |= {f"news_archive:{t}": "missing" for t in ("film", "music", "games")}
    wf = sim.start(["film", "music", "games"], faults)
    sim.drive()
    items = list(ReviewItem.objects.open())
    assert len(items) == 3 and len({i.signature for i in items}) == 1
    with sim.commit():
        assert (
            do_resolve_review(
                items[0], operator, "switch_source", channel=Channel.DASHBOARD, apply_to_group=True
            )
            == 3
        )
    sim.drive()
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.FAILED  # every source failed for every topic


def test_resolving_an_unclassified_item_can_save_an_override(sim, operator):
    from orchestrator.models import PolicyState, ProviderOverride

    sim.start(["film"], {"news_api:film": "weird"})
    sim.drive()
    item = ReviewItem.objects.get()
    version = PolicyState.current_version()
    do_resolve_review(
        item,
        operator,
        "abort",
        channel=Channel.DASHBOARD,
        failure_type="server_fault",
        save_override=True,
    )
    override = ProviderOverride.objects.get(provider="news_api")
    assert (override.match_on, override.failure_type) == ("exception_type", "server_fault")
    assert "ToolGlitch" in override.match_value
    assert PolicyState.current_version() == version + 1
    item.refresh_from_db()
    assert item.failure_type == "server_fault"
    wf2 = sim.start(["music"], {"news_api:music": ["weird", "ok"]})
    sim.drive()
    assert runs_of(wf2, "music")[0].failure_type == "server_fault"


def test_an_overdue_item_gets_its_fallback_recorded_as_such(sim):
    wf = sim.start(["film"], {"news_api:film": "auth", "news_wire:film": "missing"})
    sim.drive()
    item = ReviewItem.objects.get()
    assert review.apply_overdue_fallbacks(START + timedelta(hours=1)) == 0
    with sim.commit():
        assert review.apply_overdue_fallbacks(item.deadline_at + timedelta(seconds=1)) == 1
    item.refresh_from_db()
    assert (item.resolution, item.fallback_applied, item.resolved_by) == (
        "accept_partial",
        True,
        None,
    )
    entry = AuditEntry.objects.get(action="review.fallback")
    assert entry.actor_label == "system"
    sim.drive()
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.FAILED


def test_bulk_operator_actions_are_conditional_and_audited(sim, operator):
    wf = sim.start(["film", "music"], {"news_api:film": "invalid", "news_api:music": "sleep:0"})
    workflow.step(wf.pk)
    failed = wf.runs.get(topic="film")
    queued = wf.runs.get(topic="music")
    sim.disp.runs.clear()
    Run.objects.filter(pk=failed.pk).update(status="failed", failure_type="invalid_input")
    assert actions.do_cancel_runs([queued.pk, failed.pk], operator, channel=Channel.DASHBOARD) == 1
    assert actions.do_cancel_runs([queued.pk], operator, channel=Channel.DASHBOARD) == 0
    assert (
        actions.do_escalate_runs([failed.pk], operator, channel=Channel.DASHBOARD, reason="look")
        == 1
    )
    assert actions.do_escalate_runs([failed.pk], operator, channel=Channel.DASHBOARD) == 0
    assert actions.do_retry_runs([failed.pk], operator, channel=Channel.DASHBOARD) == 1
    assert Run.objects.filter(retry_of=failed).count() == 1
    audited = set(AuditEntry.objects.values_list("action", flat=True))
    assert {"run.cancel", "run.escalate", "run.retry"} <= audited


def test_an_operator_abort_fails_the_workflow(sim, operator):
    wf = sim.start(["film"], {})
    assert actions.do_abort_workflow(wf.pk, operator, channel=Channel.DASHBOARD) is True
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.FAILED and "Aborted by olga" in wf.coverage_summary
    assert actions.do_abort_workflow(wf.pk, operator, channel=Channel.DASHBOARD) is False


def test_the_breaker_opens_after_consecutive_failures_and_lets_three_probes_through(db):
    now = START
    SourceHealth.objects.create(source="flaky", breaker_threshold=5, breaker_cooldown=10)
    for _ in range(4):
        budget.record_failure("flaky", "server_fault", now)
        assert budget.admit("flaky", now) is None
    budget.record_failure("flaky", "server_fault", now)
    assert budget.admit("flaky", now) == now + timedelta(seconds=10)
    later = now + timedelta(seconds=11)
    assert budget.admission("flaky", later) == budget.Admission(None, probe=True)
    budget.record_failure("flaky", "server_fault", later)  # a query that fails on its own
    assert budget.health("flaky").breaker_state == "half_open"  # two probes are left
    admitted = [budget.admission("flaky", later) for _ in range(3)]
    assert admitted[:2] == [budget.Admission(None, probe=True)] * 2
    assert admitted[2] == (later + timedelta(seconds=budget.PROBE_RECHECK), False)  # waits
    budget.record_success("flaky", later)  # a probe finds the source answering
    assert budget.admit("flaky", later) is None
    states = {s.source: s for s in budget.source_states()}
    assert states["flaky"].breaker == "closed" and states["flaky"].consecutive_failures == 0
    assert not states["flaky"].in_trouble


def test_a_half_open_breaker_opens_again_at_a_failure_once_its_probes_are_out(db):
    now = START
    SourceHealth.objects.create(source="down", breaker_state="open", opened_at=now)
    later = now + timedelta(seconds=31)
    assert all(budget.admission("down", later).probe for _ in range(3))
    budget.record_failure("down", "timeout", later + timedelta(seconds=10))
    health = budget.health("down")
    assert (health.breaker_state, health.opened_at) == ("open", later + timedelta(seconds=10))
    assert budget.admit("down", later + timedelta(seconds=11)) == later + timedelta(seconds=40)
    budget.record_failure("down", "timeout", later + timedelta(seconds=10))  # the next probe
    assert budget.health("down").opened_at == later + timedelta(seconds=10)
    budget.record_success("down", later + timedelta(seconds=10))  # the last probe: it is up
    assert budget.health("down").breaker_state == "closed"
    # A threshold of one: one failure is enough to open it, and one probe to try it again.
    SourceHealth.objects.create(source="touchy", breaker_threshold=1, breaker_cooldown=10)
    budget.record_failure("touchy", "server_fault", now)
    assert budget.admission("touchy", later) == budget.Admission(None, probe=True)
    assert budget.admit("touchy", later) == later + timedelta(seconds=budget.PROBE_RECHECK)
    budget.record_failure("touchy", "server_fault", later)
    assert budget.health("touchy").breaker_state == "open"


@pytest.mark.parametrize(
    ("failure_type", "state"),
    [
        ("resource_missing", "closed"),  # a 404: the source answered
        ("auth_failure", "closed"),  # a 401 or a 403
        ("invalid_input", "closed"),  # a 400 or a 422
        ("rate_limited", "half_open"),  # it answered, asking to slow down: a probe of three
        ("server_fault", "half_open"),
        ("timeout", "half_open"),
        ("unclassified", "half_open"),  # no reliable signal: not evidence that it is up
    ],
)
def test_a_probe_refused_for_its_own_request_closes_the_breaker(db, failure_type, state):
    now = START + timedelta(seconds=31)
    SourceHealth.objects.create(source="s", breaker_state="open", opened_at=START)
    assert budget.admission("s", now).probe
    budget.record_failure("s", failure_type, now)
    health = budget.health("s")
    assert health.breaker_state == state
    if state == "closed":
        assert (health.consecutive_failures, health.opened_at) == (0, None)
        assert health.budget_tokens == 500  # nothing was served: no refund beyond capacity
        assert budget.admit("s", now) is None


def test_a_refusal_ends_a_streak_of_failures_as_a_success_does(db):
    SourceHealth.objects.create(source="s", breaker_threshold=3, budget_tokens=100)
    times = [START + timedelta(seconds=i) for i in range(5)]
    kinds = ["server_fault", "server_fault", "resource_missing", "server_fault", "server_fault"]
    answers = [budget.Answer("s", False, t, kind) for t, kind in zip(times, kinds, strict=True)]
    budget.record(answers, times[-1])
    health = budget.health("s")
    assert (health.breaker_state, health.consecutive_failures) == ("closed", 2)
    assert health.budget_tokens == 100  # a refusal refunds nothing


def test_the_breaker_counts_requests_not_the_retries_of_one(db):
    SourceHealth.objects.create(source="s", breaker_threshold=3)
    at = [START + timedelta(seconds=i) for i in range(10)]
    budget.record([budget.Answer("s", False, at[0], "server_fault")], at[0])
    budget.record([budget.Answer("s", False, at[1], "timeout")], at[1])
    for t in at[2:7]:  # one request failing again and again: its retries, bounded by the policy
        budget.record([budget.Answer("s", False, t, "server_fault", retry=True)], t)
    health = budget.health("s")
    assert (health.breaker_state, health.consecutive_failures) == ("closed", 2)
    budget.record([budget.Answer("s", False, at[7], "server_fault")], at[7])  # a third request
    assert budget.health("s").breaker_state == "open"
    # Half-open, the probes are mostly retries: once all are out, a retry's failure reopens it.
    later = at[7] + timedelta(seconds=31)
    assert all(budget.admission("s", later).probe for _ in range(3))
    budget.record([budget.Answer("s", False, later, "timeout", retry=True)], later)
    assert (budget.health("s").breaker_state, budget.health("s").opened_at) == ("open", later)


def test_a_waiter_held_back_by_a_hold_is_admitted_at_its_end(db):
    now = START
    budget.record_failure("held", "rate_limited", now, retry_after=7.5)
    end = now + timedelta(seconds=7.5)
    assert budget.admit("held", now + timedelta(seconds=1)) == end  # not a poll: the end itself
    assert budget.admit("held", end - timedelta(milliseconds=1)) == end
    assert budget.admit("held", end) is None


@contextlib.contextmanager
def only_source(source: Callable[[dict], list[dict]]) -> Iterator[None]:
    """`source` as the one source "src" of capability "cap", for the block."""
    reg = registry.Registry()
    reg.register("cap", "src", source)
    registry.use_registry(reg)
    try:
        yield
    finally:
        registry.use_registry(None)


def test_a_probe_that_closes_the_breaker_wakes_the_runs_it_held_back(sim):
    """Runs a half-open breaker held back start as soon as a probe finds the source up, not at
    their next look (PROBE_RECHECK later)."""
    held: list[str] = []

    def source(query: dict) -> list[dict]:
        if query["topic"] == "probe":
            # While the probe is in flight, the other runs come to the source (other workers).
            waiting = Run.objects.filter(source="src").exclude(topic="probe")
            for pk in waiting.values_list("pk", flat=True):
                held.append(execution.execute_run(pk, run_clock=sim.clock))
            sim.clock.sleep(0.4)
        return [{"url": f"https://src.example/{query['topic']}"}]

    with only_source(source):
        opened = START - timedelta(seconds=30)
        SourceHealth.objects.create(source="src", breaker_state="open", opened_at=opened)
        # Other workers' calls are two of the three probes, still in flight; this run is the third.
        assert budget.admission("src", START).probe and budget.admission("src", START).probe
        wf = sim.start(["probe", "w1", "w2", "w3"], {}, capability="cap")
        sim.drive()
    assert held == ["deferred"] * 3
    probe = wf.runs.get(topic="probe")
    assert probe.started_at == START and probe.finished_at == START + timedelta(seconds=0.4)
    for run in wf.runs.exclude(topic="probe"):
        assert run.status == "succeeded"
        assert probe.finished_at <= run.started_at <= probe.finished_at + timedelta(seconds=0.1)
    assert budget.health("src").breaker_state == "closed"


def test_a_call_sent_before_the_breaker_opened_that_finds_the_source_up_wakes_the_held(sim):
    """Not only a probe: a call admitted while the breaker was closed, answered after others'
    failures opened it, closes it with its success, and the runs held back meanwhile start."""
    later = START + timedelta(minutes=5)
    held: list[Run] = []

    def source(query: dict) -> list[dict]:
        if query.get("topic") == "inflight":
            # While this call is in flight, other callers' failures open the breaker, and
            # another run comes to the source and is held back until its next look.
            SourceHealth.objects.filter(source="src").update(breaker_state="open", opened_at=START)
            wf = Workflow.objects.create(name="other", topics=["x"], capability="cap")
            fields = dict(workflow=wf, topic="x", agent="a", source="src", status="queued")
            held.append(Run.objects.create(**fields, due_at=later, dispatched_at=START))
            sim.clock.sleep(0.4)
        return [{"url": f"https://src.example/{query.get('topic', 'other')}"}]

    with only_source(source):
        SourceHealth.objects.create(source="src")
        wf = sim.start(["inflight"], {}, capability="cap")
        sim.drive()
    call = wf.runs.get()
    assert call.status == "succeeded" and call.finished_at == START + timedelta(seconds=0.4)
    assert budget.health("src").breaker_state == "closed"
    woken = Run.objects.get(pk=held[0].pk)  # started once the answer came, not at its look
    assert woken.status == "succeeded", (woken.failure_type, woken.detail)
    assert call.finished_at <= woken.started_at <= call.finished_at + timedelta(seconds=0.1)


def test_waking_leaves_runs_that_were_never_sent_and_respects_a_hold(db):
    now = START
    wf = Workflow.objects.create(name="w", topics=["a"], capability="news")
    later = now + timedelta(seconds=30)
    fields = dict(workflow=wf, topic="a", agent="a", source="news_api", status="queued")
    held = Run.objects.create(**fields, due_at=later, dispatched_at=now)
    backoff = Run.objects.create(**fields, due_at=later)  # a retry's own backoff: never sent
    elsewhere = fields | {"source": "news_wire"}
    other = Run.objects.create(**elsewhere, due_at=later, dispatched_at=now)
    SourceHealth.objects.create(source="news_api", breaker_state="half_open", opened_at=now)
    assert budget.wake_deferred("news_api", now) == 0  # not closed yet
    budget.record_success("news_api", now)
    budget.record_failure("news_api", "rate_limited", now, retry_after=2)
    assert budget.wake_deferred("news_api", now) == 1
    due = {run.pk: run.due_at for run in Run.objects.all()}
    assert due[held.pk] == now + timedelta(seconds=2)  # the hold still holds it back
    assert due[backoff.pk] == due[other.pk] == later


def test_recording_says_which_breakers_its_answers_closed(db):
    """`record` names the sources whose open or half-open breaker its answers closed (and stamps
    `closed_at`), and no other: not an already closed one, nor one the same answers trip again."""
    now = START
    for source, state in [("half", "half_open"), ("open", "open"), ("fine", "closed")]:
        SourceHealth.objects.create(source=source, breaker_state=state, opened_at=now)
    SourceHealth.objects.create(source="again", breaker_state="open", breaker_threshold=2)
    up = [budget.Answer(s, True, now) for s in ("half", "open", "fine")]
    failures = [
        budget.Answer("again", False, now + timedelta(seconds=i), "server_fault") for i in (1, 2)
    ]
    closed = budget.record([*up, budget.Answer("again", True, now), *failures], now)
    assert closed == {"half", "open"}
    states = dict(SourceHealth.objects.values_list("source", "breaker_state"))
    assert states == {"half": "closed", "open": "closed", "fine": "closed", "again": "open"}
    stamped = dict(SourceHealth.objects.values_list("source", "closed_at"))
    assert stamped == {"half": now, "open": now, "fine": None, "again": None}
    assert budget.record([budget.Answer("half", True, now + timedelta(seconds=1))], now) == set()


def test_the_retry_budget_is_spent_and_refunded_atomically(db):
    SourceHealth.objects.create(source="b", budget_capacity=10, budget_tokens=10, retry_cost=5)
    assert budget.try_spend("b", 5) and budget.try_spend("b", 5)
    assert not budget.try_spend("b", 5)
    budget.record_success("b")
    state = budget.source_states()
    row = next(s for s in state if s.source == "b")
    assert row.tokens == 1 and row.empty is True
    assert row.in_trouble and row.label == "breaker closed, budget empty"
    assert not budget.record_failure("b", "resource_missing", START)
    assert SourceHealth.objects.get(source="b").consecutive_failures == 0


def test_the_sweeper_sends_due_runs_and_lost_messages_once_each(sim, settings):
    wf = sim.start(["film"], {"news_api:film": "ok:1"})
    sim.disp.steps.clear()
    with sim.commit():
        workflow.step(wf.pk)
    sim.disp.runs.clear()  # the step's own message: forget it, as a broker losing it would
    run = wf.runs.get()
    assert run.status == Run.Status.RUNNING and run.lease_until is None

    later = START + timedelta(seconds=settings.LOST_DISPATCH_SECONDS + 1)
    queued = Run.objects.create(
        workflow=wf, topic="film", agent="a", source="news_wire", status="queued", due_at=later
    )
    with sim.commit():
        dispatch.sweep(later)
    assert sorted(sim.disp.runs) == sorted([run.pk, queued.pk])  # a lost one and a due one
    assert not sim.disp.steps  # its runs are in flight: nothing in the workflow is due
    with sim.commit():
        dispatch.sweep(later)
    assert len(sim.disp.runs) == 2  # neither is sent twice by the next sweep
