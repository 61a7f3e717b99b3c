"""Switch and escalate: the work goes on on the alternative while a review item that blocks
nothing asks a person to repair the failing source; its resolution applies to what comes next.

Driven in process with the simulated clock (tests/orchestrator/test_coordinator.py's way), on the
real database.
"""

from __future__ import annotations

import pytest

from orchestrator.coordination.actions import do_resolve_review
from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.coordination.review import resolution_options
from orchestrator.models import AuditEntry, ReviewItem, RoutingPolicy, Run, SourceHealth, Workflow
from orchestrator.vocabulary import Action, Channel

from .test_coordinator import sim  # noqa: F401  (the fixture)


@pytest.fixture
def switch_and_escalate_auth(db):
    """Auth failures, once the refresh did not help, switch and escalate."""
    switch_and_escalate_auth_failures()


def switch_and_escalate_auth_failures() -> None:
    row, _ = RoutingPolicy.objects.get_or_create(
        failure_type="auth_failure",
        defaults=dict(max_attempts=1, base_delay=0, max_delay=0, hard_fail=True),
    )
    row.action_when_exhausted = Action.SWITCH_AND_ESCALATE
    save_policy_change(row, actor=None, note="work goes on while a person repairs")


def first_source(wf: Workflow, topic: str) -> str:
    return wf.runs.filter(topic=topic).order_by("pk").first().source


def test_the_workflow_finishes_on_the_alternative_and_the_repair_re_enables_the_source(
    sim,  # noqa: F811
    operator,
    switch_and_escalate_auth,
):
    wf = sim.start(["film"], {"news_api:film": "auth", "news_wire:film": "ok:2"})
    sim.drive()
    wf.refresh_from_db()
    item = ReviewItem.objects.get()
    # The workflow finished on the alternative while the item is still open.
    assert wf.status == Workflow.Status.SUCCEEDED
    assert item.state == ReviewItem.State.OPEN and item.blocking is False
    assert item.deadline_at is None  # nothing waits, so no fallback decides it
    failed = item.run
    assert (failed.source, failed.status) == ("news_api", "failed")
    assert failed.decision == "switch_source"
    assert "news_wire is tried next, and a person is asked to repair news_api" in (
        failed.decision_reason
    )
    switched = Run.objects.get(source="news_wire")
    assert switched.switched_from == failed and switched.status == Run.Status.SUCCEEDED
    # Coverage says which source answered and which failed.
    cov = wf.coverage["film"]
    assert cov["results"] == 2 and "news_api could not be reached (auth_failure)" in cov["why"]
    assert not ReviewItem.objects.blocking().exists()
    # Until it is repaired, new work starts elsewhere.
    health = SourceHealth.objects.get(source="news_api")
    assert health.disabled_at is not None and f"#{item.pk}" in health.disabled_reason
    wf2 = sim.start(["music"], {})
    sim.drive()
    assert first_source(wf2, "music") == "news_wire"

    offered = {o.value for o in resolution_options(item)}
    assert offered == {"reenable_source", "retry", "dismiss"}
    with sim.commit():
        assert do_resolve_review(
            item, operator, "reenable_source", channel=Channel.DASHBOARD, note="key rotated"
        )
    sim.drive()
    item.refresh_from_db()
    health.refresh_from_db()
    assert health.disabled_at is None and health.disabled_reason == ""
    assert item.outcome == "news_api re-enabled: new work may start on it again."
    entry = AuditEntry.objects.get(action="source.reenable")
    assert (entry.object_type, entry.actor_label) == ("sourcehealth", "olga")
    assert entry.before["disabled_at"] and entry.after["disabled_at"] is None
    # The resolution applies to what comes next, not to the finished workflow.
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.SUCCEEDED
    wf3 = sim.start(["poetry"], {})
    sim.drive()
    assert first_source(wf3, "poetry") == "news_api"


def test_a_retry_re_enables_the_source_and_adds_its_answer(
    sim,  # noqa: F811
    operator,
    switch_and_escalate_auth,
):
    faults = {"news_api:film": ["auth", "auth", "ok:1"], "news_wire:film": "ok:2"}
    wf = sim.start(["film"], faults)
    sim.drive()
    item = ReviewItem.objects.get()
    with sim.commit():
        do_resolve_review(item, operator, "retry", channel=Channel.DASHBOARD, note="fixed")
    sim.drive()
    item.refresh_from_db()
    retried = Run.objects.filter(source="news_api").order_by("-attempt").first()
    assert retried.status == Run.Status.SUCCEEDED
    assert item.outcome == (
        f"news_api re-enabled and asked again: run #{retried.pk} (attempt {retried.attempt})."
    )
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.SUCCEEDED
    assert wf.coverage["film"]["verdict"] == "well_supported"
    assert SourceHealth.objects.get(source="news_api").disabled_at is None


def test_only_work_with_no_alternative_waits(sim, switch_and_escalate_auth):  # noqa: F811
    faults = {"news_api:film": "auth", "news_wire:film": "missing", "news_archive:film": "auth"}
    wf = sim.start(["film"], faults)
    sim.drive()
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.AWAITING_REVIEW
    repair = ReviewItem.objects.get(run__source="news_api")
    waiting = ReviewItem.objects.get(run__source="news_archive")
    assert (repair.blocking, waiting.blocking) == (False, True)
    assert waiting.run.decision == "escalate" and "no other source is left" in (
        waiting.run.decision_reason
    )
    # Only the item work waits on keeps the workflow open.
    assert list(ReviewItem.objects.blocking()) == [waiting]


def test_a_dismissed_repair_leaves_the_source_switched_away(
    sim,  # noqa: F811
    operator,
    switch_and_escalate_auth,
):
    sim.start(["film"], {"news_api:film": "auth"})
    sim.drive()
    item = ReviewItem.objects.get()
    with sim.commit():
        do_resolve_review(item, operator, "dismiss", channel=Channel.DASHBOARD, note="later")
    sim.drive()
    item.refresh_from_db()
    assert item.outcome.startswith("Dismissed")
    assert SourceHealth.objects.get(source="news_api").disabled_at is not None
    assert not AuditEntry.objects.filter(action="source.reenable").exists()


def test_the_same_failure_in_two_workflows_asks_for_one_repair(
    sim,  # noqa: F811
    switch_and_escalate_auth,
):
    first = sim.start(["film"], {"news_api:film": "auth"})
    second = sim.start(["film"], {"news_api:film": "auth"})
    sim.drive()
    item = ReviewItem.objects.get()
    assert item.blocking is False
    for wf in (first, second):
        wf.refresh_from_db()
        assert wf.status == Workflow.Status.SUCCEEDED
        assert wf.runs.get(source="news_api", attempt=2).decision == "switch_source"


def test_a_switch_goes_to_a_source_waiting_for_its_repair_only_when_nothing_else_is_left(
    sim,  # noqa: F811
    switch_and_escalate_auth,
):
    sim.start(["film"], {"news_api:film": "auth"})
    sim.drive()
    # news_api waits for its repair: a failure elsewhere switches past it while it can.
    wf = sim.start(["music"], {"news_wire:music": "missing", "news_archive:music": "missing"})
    sim.drive()
    assert [r.source for r in wf.runs.order_by("pk")] == ["news_wire", "news_archive", "news_api"]
