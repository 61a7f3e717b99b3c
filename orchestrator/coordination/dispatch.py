"""Sending work to Celery, and the sweeper's safety nets: the one place tasks are enqueued.

Tasks are sent by name, so neither this module nor its callers import `orchestrator.tasks` (which
imports the coordination modules whose functions the tasks run): the arrows point one way. Every
send happens after the caller's transaction commits, so a worker never looks for a row that is not
visible yet. `dispatcher` is replaced by the simulation (tests, the recovery benchmark), which runs
the same steps in process. What a step or a run does lives in `workflow` and `execution`.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from celery import current_app
from django.db import transaction

from orchestrator.coordination import clock
from orchestrator.models import Run, Workflow

RUN_TASK = "orchestrator.tasks.run_subagent"
STEP_TASK = "orchestrator.tasks.coordinate"
# A claimed run whose task never started in this long lost its message (broker hiccup).
LOST_DISPATCH_AFTER = timedelta(minutes=10)
# A running workflow untouched this long gets a step, in case a step message was lost.
NUDGE_AFTER = timedelta(minutes=5)


class Dispatcher(Protocol):
    def run(self, run_id: int) -> None: ...

    def step(self, workflow_id: int, review_item_id: int | None = None) -> None: ...


class CeleryDispatcher:
    """Sends the tasks by name; callers make sure this happens after their transaction commits."""

    def run(self, run_id: int) -> None:
        current_app.send_task(RUN_TASK, args=[run_id])

    def step(self, workflow_id: int, review_item_id: int | None = None) -> None:
        current_app.send_task(STEP_TASK, args=[workflow_id, review_item_id])


dispatcher: Dispatcher = CeleryDispatcher()


def after_commit_step(workflow_id: int | None, review_item_id: int | None = None) -> None:
    """Send a coordinator step for the workflow once the current transaction commits."""
    if workflow_id:
        transaction.on_commit(lambda: dispatcher.step(workflow_id, review_item_id))


def after_commit_dispatch(workflow_id: int | None = None) -> None:
    """Claim and send the workflow's due runs once the current transaction commits."""
    transaction.on_commit(lambda: dispatch_due(workflow_id=workflow_id))


def dispatch_due(
    now: datetime | None = None, workflow_id: int | None = None, limit: int = 200
) -> int:
    """Claim due queued runs (queued → running, one winner each) and send them; return count."""
    now = now or clock.now()
    due = Run.objects.due(now).filter(workflow__isnull=False).exclude(workflow__capability="")
    if workflow_id:
        due = due.filter(workflow_id=workflow_id)
    sent = 0
    for pk in due.order_by("due_at").values_list("pk", flat=True)[:limit]:
        if Run.objects.filter(pk=pk).claim_due(now):
            dispatcher.run(pk)
            sent += 1
    return sent


def sweep(now: datetime | None = None) -> int:
    """The beat's safety nets: due retries, lost enqueues and stalled workflows."""
    now = now or clock.now()
    sent = dispatch_due(now)
    lost = Run.objects.lost_dispatches(now - LOST_DISPATCH_AFTER)
    for pk in lost.values_list("pk", flat=True)[:100]:
        if Run.objects.filter(pk=pk, started_at__isnull=True).update(dispatched_at=now):
            dispatcher.run(pk)
            sent += 1
    stalled = Workflow.objects.unfinished().filter(updated_at__lt=now - NUDGE_AFTER)
    for pk in stalled.values_list("pk", flat=True)[:100]:
        dispatcher.step(pk)
    return sent
