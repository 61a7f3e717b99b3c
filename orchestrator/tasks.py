"""Celery tasks: thin, taking ids; the work lives in `orchestrator.coordination`.

Every task is idempotent by the id it takes, so a redelivery (acks_late with
reject_on_worker_lost: a killed worker's task comes back) or a message sent twice by the outbox is
harmless; a run's lease keeps two deliveries from executing it at once. Tasks are sent by name from
`coordination.dispatch`, so this module is the only one that imports both Celery's decorators and
the coordination modules: nothing imports it back.
"""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from orchestrator import counters, partitions, search
from orchestrator.coordination import delivery, dispatch, efficacy, execution, review, workflow

# A database that restarts or drops a connection fails the task with one of these: it is tried
# again with backoff instead of leaving its run or workflow behind. The longest wait stays below
# the smallest visibility timeout (10 s), past which Redis would deliver the message twice.
ON_DATABASE_ERRORS = dict(
    autoretry_for=(OperationalError, InterfaceError),
    retry_backoff=1,
    retry_backoff_max=8,
    retry_jitter=True,
    max_retries=12,
)


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, **ON_DATABASE_ERRORS)
def run_subagent(run_id: int) -> str:
    """Call one run's source with local recovery and record its envelope; then step the workflow."""
    return execution.execute_run(run_id)


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, **ON_DATABASE_ERRORS)
def coordinate(workflow_id: int, review_item_id: int | None = None) -> str:
    """Advance a workflow: route failures, apply a resolved review item once, settle."""
    return workflow.step(workflow_id, review_item_id)


@shared_task(ignore_result=True)
def sweep() -> int:
    """Send what is due: unsent outbox messages, due retries, lost runs, runs whose lease ran out,
    stalled workflows, webhook attempts that died with their worker (retries and delays wait in
    the database, never in the broker)."""
    return dispatch.sweep() + delivery.resend_stalled()


@shared_task(ignore_result=True)
def apply_review_fallbacks() -> int:
    """Resolve review items left undecided past their deadline with their type's fallback."""
    return review.apply_overdue_fallbacks()


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, **ON_DATABASE_ERRORS)
def deliver_resolution(delivery_id: int) -> str:
    """POST a review item's resolution to its token's callback URL, signed (one attempt)."""
    return delivery.deliver(delivery_id)


@shared_task(ignore_result=True)
def refresh_switch_efficacy() -> int:
    """Cache the switch-efficacy matrix the coordinator orders alternatives by."""
    return efficacy.refresh()


@shared_task(ignore_result=True)
def fold_workflow_counters() -> int:
    """Move the per-workflow run deltas the triggers appended into the workflows' counters."""
    return counters.fold_workflow_counters()


@shared_task(ignore_result=True)
def create_run_partitions() -> list[str]:
    """Create the run table's partitions of the coming days that are missing (PostgreSQL)."""
    return partitions.ensure_ahead(settings.RUN_PARTITIONS_AHEAD)


@shared_task(ignore_result=True)
def fill_run_search() -> int:
    """Add the new runs' entries to the runs search's table (PostgreSQL), a few seconds behind."""
    return search.catch_up() if search.in_use() else 0
