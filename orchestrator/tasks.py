"""Celery tasks: thin, taking ids; the work lives in `orchestrator.coordination`. Every task is
idempotent by its id, so a redelivery or a message sent twice by the outbox is harmless."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.db import InterfaceError, OperationalError

from orchestrator import counters, partitions, pricing, search
from orchestrator.coordination import (
    deadlines,
    dispatch,
    efficacy,
    execution,
    owners,
    review,
    webhooks,
    workflow,
)
from orchestrator.ingest import span_joins

# The longest wait stays below the smallest visibility timeout (10 s), past which Redis would
# deliver the message twice.
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
    """Send what is due: retries and delays wait in the database, never in the broker. Runs
    an agent never finished are finished at their deadline."""
    return dispatch.sweep() + deadlines.finish_overdue_runs() + webhooks.resend_stalled()


@shared_task(ignore_result=True)
def apply_review_fallbacks() -> int:
    return review.apply_overdue_fallbacks()


@shared_task(ignore_result=True)
def remind_review_owners() -> int:
    """Remind owner groups of the items left unclaimed, and move on those left after that."""
    return owners.remind_and_move()


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, **ON_DATABASE_ERRORS)
def deliver_webhook(delivery_id: int) -> str:
    """POST a webhook (a review's resolution, a fired alert), signed (one attempt)."""
    return webhooks.deliver(delivery_id)


@shared_task(ignore_result=True)
def refresh_switch_efficacy() -> int:
    return efficacy.refresh()


@shared_task(ignore_result=True)
def fold_workflow_counters() -> int:
    return counters.fold_workflow_counters()


@shared_task(ignore_result=True)
def create_run_partitions() -> list[str]:
    return partitions.ensure_ahead(settings.RUN_PARTITIONS_AHEAD)


@shared_task(ignore_result=True)
def fill_run_search() -> int:
    return search.catch_up() if search.in_use() else 0


@shared_task(ignore_result=True)
def release_held_spans() -> int:
    """OTLP spans held for a parent that never came become runs of their own."""
    return span_joins.release_due()


@shared_task(acks_late=True, reject_on_worker_lost=True, ignore_result=True, **ON_DATABASE_ERRORS)
def reprice(kind: str, name: str, since: str, until: str | None) -> int:
    """Price again the runs a price edit changed (idempotent: it prices at the current table)."""
    return pricing.reprice(pricing.Window.from_args(kind, name, since, until))
