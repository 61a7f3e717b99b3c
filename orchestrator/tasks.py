"""Celery tasks: thin, taking ids; the work lives in `orchestrator.coordination`.

Every task is idempotent by the id it takes, so a redelivery (acks_late with
reject_on_worker_lost: a killed worker's task comes back) is harmless. Tasks are sent by name from
`coordination.dispatch`, so this module is the only one that imports both Celery's decorators and
the coordination modules: nothing imports it back.
"""

from __future__ import annotations

from celery import shared_task

from orchestrator.coordination import dispatch, execution, review, workflow


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_subagent(run_id: int) -> str:
    """Call one run's source with local recovery and record its envelope; then step the workflow."""
    return execution.execute_run(run_id)


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def coordinate(workflow_id: int, review_item_id: int | None = None) -> str:
    """Advance a workflow: route failures, apply a resolved review item once, settle."""
    return workflow.step(workflow_id, review_item_id)


@shared_task(ignore_result=True)
def sweep() -> int:
    """Enqueue queued runs whose due time has come (retries wait in the database)."""
    return dispatch.sweep()


@shared_task(ignore_result=True)
def apply_review_fallbacks() -> int:
    """Resolve review items left undecided past their deadline with their type's fallback."""
    return review.apply_overdue_fallbacks()
