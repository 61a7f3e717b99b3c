"""Recovery in process: the outbox, run leases and the sweeper's proportionate nudges.

The coordinator is driven with the simulated clock and dispatcher of `coordination.simulation`
(no worker); tests/orchestrator/test_worker.py and test_chaos.py repeat the important paths with
real worker processes, a real broker and real faults.
"""

from __future__ import annotations

import os
import subprocess
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from celery.exceptions import OperationalError as BrokerError
from django.db import OperationalError, transaction

from orchestrator import tasks
from orchestrator.coordination import dispatch, execution, workflow
from orchestrator.coordination.actions import do_resolve_review
from orchestrator.coordination.simulation import InlineDispatcher, drive, simulated
from orchestrator.models import OutboxMessage, ReviewItem, Run, Workflow
from orchestrator.vocabulary import Channel

START = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)


class DownBroker(InlineDispatcher):
    """A dispatcher whose broker refuses every message, as Celery does when Redis is down."""

    def send(self, task, args):
        raise BrokerError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


@pytest.fixture
def sim(db, django_capture_on_commit_callbacks):
    with simulated(START) as (clock, disp):
        yield clock, disp


def committed(django_capture_on_commit_callbacks):
    return django_capture_on_commit_callbacks(execute=True)


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def claimed_run(wf: Workflow, topic: str = "film") -> Run:
    """Step the workflow once (its first attempts claimed) and return one of its runs; the
    messages written so far count as sent (their relay never runs in a test's transaction)."""
    workflow.step(wf.pk)
    OutboxMessage.objects.all().delete()
    return wf.runs.get(topic=topic)


def start(topics=("film",), faults=None) -> Workflow:
    return workflow.start_workflow(
        "AI impact", list(topics), "news", input={"faults": faults or {}}
    )


# ---------------------------------------------------------------------------------------------
# The outbox


def test_a_message_is_written_with_its_change_and_sent_after_the_commit(
    sim, django_capture_on_commit_callbacks
):
    _, disp = sim
    with committed(django_capture_on_commit_callbacks), transaction.atomic():
        wf = start()
        message = OutboxMessage.objects.get()
        assert (message.task, message.args) == (dispatch.STEP_TASK, [wf.pk, None])
        assert not disp.steps  # nothing leaves before the commit
    assert list(disp.steps) == [(wf.pk, None)]
    assert not OutboxMessage.objects.exists()  # sent, so gone


def test_a_rolled_back_change_sends_nothing(sim, django_capture_on_commit_callbacks):
    _, disp = sim
    rolled_back = pytest.raises(RuntimeError)
    with committed(django_capture_on_commit_callbacks), rolled_back, transaction.atomic():
        start()
        raise RuntimeError("the request failed after the insert")
    assert not disp.steps and not OutboxMessage.objects.exists() and not Workflow.objects.exists()


def test_a_broker_outage_delays_the_message_and_the_sweeper_sends_it_later(
    sim, settings, django_capture_on_commit_callbacks
):
    _, disp = sim
    dispatch.dispatcher = DownBroker()
    with committed(django_capture_on_commit_callbacks):
        wf = start()  # no exception: the start stands, its step waits in the outbox
    message = OutboxMessage.objects.get()
    assert "Connection refused" in message.last_error
    dispatch.dispatcher = disp
    soon = START + timedelta(seconds=settings.OUTBOX_RESEND_SECONDS - 1)
    with committed(django_capture_on_commit_callbacks):
        dispatch.sweep(soon)
    assert not disp.steps  # within its grace: the relay may still be on it
    later = START + timedelta(seconds=settings.OUTBOX_RESEND_SECONDS)
    with committed(django_capture_on_commit_callbacks):
        dispatch.sweep(later)
    assert list(disp.steps) == [(wf.pk, None)]
    assert not OutboxMessage.objects.exists()


def test_the_sweeper_claims_a_message_before_sending_so_a_crash_resends_it(sim, settings):
    _, disp = sim
    dispatch.dispatcher = DownBroker()
    wf = start()
    later = START + timedelta(seconds=settings.OUTBOX_RESEND_SECONDS)
    dispatch.sweep(later)  # the broker is still down
    message = OutboxMessage.objects.get()
    assert message.attempts == 1
    assert message.available_at == later + timedelta(seconds=settings.OUTBOX_RESEND_SECONDS)
    dispatch.dispatcher = disp
    dispatch.sweep(later)  # claimed for a while: not sent twice meanwhile
    assert not disp.steps
    dispatch.sweep(message.available_at)
    assert list(disp.steps) == [(wf.pk, None)]


def test_a_review_resolution_writes_its_step_in_the_same_transaction(sim, operator):
    wf = start(faults={"news_api:film": "missing", "news_wire:film": "auth"})
    drive(*sim)
    item = ReviewItem.objects.get(workflow=wf)
    OutboxMessage.objects.all().delete()
    with pytest.raises(RuntimeError), transaction.atomic():
        assert do_resolve_review(item, operator, "retry", channel=Channel.DASHBOARD) == 1
        assert OutboxMessage.objects.filter(args=[wf.pk, item.pk]).count() == 1
        raise RuntimeError("rolled back")
    item.refresh_from_db()
    assert item.is_pending and not OutboxMessage.objects.exists()


def test_the_database_errors_of_a_task_are_retried_with_backoff():
    for task in (tasks.run_subagent, tasks.coordinate):
        assert OperationalError in task.autoretry_for
        assert task.retry_backoff and task.max_retries >= 5
        assert task.retry_backoff_max < 10  # below the smallest visibility timeout


# ---------------------------------------------------------------------------------------------
# Leases


def test_a_started_run_holds_a_lease_and_a_second_delivery_skips_it(sim, settings):
    wf = start()
    run = claimed_run(wf)
    now = START
    owner = f"{execution.lease_owner().rpartition(':')[0]}:{os.getppid()}"  # a live process
    assert run.start(now, owner, now + timedelta(seconds=60)) == 1
    assert execution.execute_run(run.pk) == "skipped"
    run.refresh_from_db()
    assert (run.deliveries, run.status, run.lease_owner) == (1, "running", owner)


def test_a_delivery_whose_holder_died_takes_the_run_at_once(sim):
    wf = start()
    run = claimed_run(wf)
    host = execution.lease_owner().rpartition(":")[0]
    run.start(START, f"{host}:{dead_pid()}", START + timedelta(seconds=60))
    assert execution.execute_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.deliveries == 2 and run.lease_until is None and run.lease_owner == ""


def test_a_holder_on_another_host_is_never_presumed_dead():
    assert execution.holder_is_dead(f"{execution.lease_owner().rpartition(':')[0]}:{dead_pid()}")
    assert not execution.holder_is_dead(f"elsewhere.example:{dead_pid()}")
    assert not execution.holder_is_dead(execution.lease_owner())  # this very process
    assert not execution.holder_is_dead("garbage")


def test_an_expired_lease_is_taken_back_once_and_sent_for_a_new_delivery(
    sim, settings, django_capture_on_commit_callbacks
):
    _, disp = sim
    wf = start()
    run = claimed_run(wf)
    disp.runs.clear()
    run.start(START, "other-host:1", START + timedelta(seconds=settings.RUN_LEASE_SECONDS))
    with committed(django_capture_on_commit_callbacks):
        dispatch.sweep(START + timedelta(seconds=settings.RUN_LEASE_SECONDS - 1))
    assert not disp.runs  # the lease still holds
    expired = START + timedelta(seconds=settings.RUN_LEASE_SECONDS + 1)
    with committed(django_capture_on_commit_callbacks):
        dispatch.sweep(expired)
        dispatch.sweep(expired)
    assert list(disp.runs) == [run.pk]  # taken back once
    run.refresh_from_db()
    assert (run.lease_until, run.lease_owner, run.dispatched_at) == (None, "", expired)
    assert execution.execute_run(run.pk) == "succeeded"
    run.refresh_from_db()
    assert run.deliveries == 2


def test_a_delivery_that_lost_its_run_records_nothing(sim):
    wf = start()
    run = claimed_run(wf)
    first = run.start(START, "a:1", START + timedelta(seconds=1))
    later = START + timedelta(seconds=5)
    second = Run.objects.get(pk=run.pk).start(later, "b:2", later + timedelta(seconds=60))
    assert (first, second) == (1, 2)
    ok = {"status": "ok", "results": [{"n": 1}]}
    assert run.record_outcome(ok, later, 1, delivery=first) is False  # fenced out
    assert run.record_outcome(ok, later, 1, delivery=second) is True
    assert Run.objects.get(pk=run.pk).status == "succeeded"


def test_a_run_whose_worker_keeps_dying_is_parked_after_the_delivery_limit(
    sim, settings, django_capture_on_commit_callbacks
):
    clock, _ = sim
    settings.RUN_MAX_DELIVERIES = 2
    wf = start()
    run = claimed_run(wf)
    now = START
    for _ in range(settings.RUN_MAX_DELIVERIES):  # each delivery dies holding the lease
        Run.objects.get(pk=run.pk).start(now, "gone:1", now + timedelta(seconds=60))
        now += timedelta(seconds=61)
        dispatch.sweep(now)
    clock.advance_to(now)
    assert execution.execute_run(run.pk, run_clock=clock) == "parked"
    run.refresh_from_db()
    assert run.status == "failed" and run.calls == 0
    assert "its worker died 2 times" in run.detail


# ---------------------------------------------------------------------------------------------
# Proportionate nudges


def test_a_stuck_workflow_costs_one_step_per_window_and_a_waiting_one_none(sim, settings, operator):
    _, disp = sim
    settings.NUDGE_SECONDS = 30
    waits_for_review = start(["review"])
    waits_for_retry = start(["retry"])
    held_by_a_worker = start(["held"])
    lost_its_step = start(["lost"])
    for wf in (waits_for_review, waits_for_retry, held_by_a_worker, lost_its_step):
        workflow.step(wf.pk)
    review_run = waits_for_review.runs.get()
    Run.objects.filter(pk=review_run.pk).update(status="escalated", decision="escalate")
    ReviewItem.objects.create(run=review_run, workflow=waits_for_review, reason="look")
    Workflow.objects.filter(pk=waits_for_review.pk).update(status="awaiting_review")
    waits_for_retry.runs.update(status="queued", due_at=START + timedelta(hours=1))
    held = held_by_a_worker.runs.get()
    held.start(START, "worker:1", START + timedelta(hours=1))  # a live lease for the whole test
    lost_its_step.runs.update(status="failed", failure_type="timeout")  # its step never came
    Workflow.objects.update(updated_at=START)
    OutboxMessage.objects.all().delete()  # as if relayed: only the nudges are counted
    disp.steps.clear()

    windows = 5
    for second in range(1, windows * settings.NUDGE_SECONDS + 1, 2):  # a sweep every 2 s
        dispatch.sweep(START + timedelta(seconds=second))
    steps = Counter(workflow_id for workflow_id, _ in disp.steps)
    # Untouched since START: the first nudge after one window, then one per window (not one per
    # sweep: 75 sweeps ran); the workflows with nothing due were never stepped.
    assert steps == {lost_its_step.pk: windows - 1}
    assert Workflow.objects.needing_step().get() == lost_its_step


def test_a_nudged_workflow_is_stepped_and_settles(
    sim, settings, django_capture_on_commit_callbacks
):
    clock, disp = sim
    wf = start(faults={"news_api:film": "ok:1"})
    run = claimed_run(wf)
    assert execution.execute_run(run.pk, run_clock=clock) == "succeeded"
    disp.steps.clear()  # the step its outcome sent: lost
    OutboxMessage.objects.all().delete()
    Workflow.objects.filter(pk=wf.pk).update(updated_at=START)
    later = START + timedelta(seconds=settings.NUDGE_SECONDS + 1)
    with committed(django_capture_on_commit_callbacks):
        dispatch.sweep(later)
    assert list(disp.steps) == [(wf.pk, None)]
    workflow.step(wf.pk)
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.SUCCEEDED


def test_a_slow_but_live_holder_keeps_its_run_even_after_the_sweeper_freed_it(sim, settings):
    wf = start()
    run = claimed_run(wf)
    owner = f"{execution.lease_owner().rpartition(':')[0]}:{os.getppid()}"  # alive
    delivery = run.start(START, owner, START + timedelta(seconds=1))
    later = START + timedelta(seconds=5)
    assert Run.objects.filter(pk=run.pk).take_back(later) == 1  # its heartbeat was late
    assert run.renew_lease(delivery, owner, later + timedelta(seconds=60)) is True
    assert execution.execute_run(run.pk) == "skipped"  # the resent message finds it held
    assert Run.objects.get(pk=run.pk).deliveries == delivery
    stolen = Run.objects.get(pk=run.pk).start(
        later + timedelta(seconds=61), "other:1", later + timedelta(seconds=120)
    )
    assert stolen == delivery + 1
    assert run.renew_lease(delivery, owner, later + timedelta(seconds=120)) is False
