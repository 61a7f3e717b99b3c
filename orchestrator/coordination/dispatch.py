"""Sending work to Celery through the outbox, and the sweeper's safety nets: the one place tasks
are sent. A message is a row written in the caller's transaction and relayed after the commit, so
a broker outage delays work and never loses it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Protocol

from celery import current_app
from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import F

from orchestrator.coordination import clock
from orchestrator.models import OutboxMessage, Run, WebhookDelivery, Workflow
from orchestrator.vocabulary import Coordinator

logger = logging.getLogger(__name__)

RUN_TASK = "orchestrator.tasks.run_subagent"
STEP_TASK = "orchestrator.tasks.coordinate"
DELIVER_TASK = "orchestrator.tasks.deliver_webhook"
# One quick reconnect (a connection the broker dropped), then the outbox keeps the message.
PUBLISH_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
SWEEP_BATCH = 200


class Dispatcher(Protocol):
    def send(self, task: str, args: list[Any]) -> None: ...


class CeleryDispatcher:
    def send(self, task: str, args: list[Any]) -> None:
        current_app.send_task(task, args=args, retry=True, retry_policy=PUBLISH_RETRY)


dispatcher: Dispatcher = CeleryDispatcher()


def lost_dispatch_window() -> timedelta:
    return timedelta(seconds=settings.LOST_DISPATCH_SECONDS)


def nudge_window() -> timedelta:
    return timedelta(seconds=settings.NUDGE_SECONDS)


def enqueue(task: str, args: list[Any], delay: float = 0) -> OutboxMessage:
    """Write a message in the current transaction; it is sent after the commit (or after `delay`
    seconds, by the sweeper). Outside a transaction it is written and sent at once."""
    now = clock.now()
    wait = delay if delay > 0 else settings.OUTBOX_RESEND_SECONDS
    message = OutboxMessage.objects.create(
        task=task, args=args, created_at=now, available_at=now + timedelta(seconds=wait)
    )
    if delay <= 0:
        transaction.on_commit(lambda: relay([message.pk]))
    return message


def step(workflow_id: int | None, review_item_id: int | None = None) -> None:
    if workflow_id:
        enqueue(STEP_TASK, [workflow_id, review_item_id])


def run(run_id: int) -> None:
    enqueue(RUN_TASK, [run_id])


def queue_webhook(
    event: str, url: str, payload: dict[str, Any], sealed_secret: str, **links: Any
) -> WebhookDelivery:
    """Write a delivery of `payload` to `url` and the outbox message that sends it after the
    caller's transaction commits; `links` are the delivery's item and token, if any. Here, not
    in `webhooks` (the deliverer), so that what opens review items can announce them."""
    delivery = WebhookDelivery.objects.create(
        event=event, url=url, payload=payload, sealed_secret=sealed_secret, **links
    )
    enqueue(DELIVER_TASK, [delivery.pk])
    return delivery


def relay(ids: Iterable[int]) -> int:
    """Send these outbox rows, if still there, and delete each one the broker took.

    Stops at the first refusal (every further try would wait as long). Never raises: it runs
    after a commit that already stands.
    """
    try:
        messages = list(OutboxMessage.objects.filter(pk__in=list(ids)).order_by("id"))
    except DatabaseError:
        logger.warning("outbox relay could not read its messages; the sweeper will send them")
        return 0
    sent: list[int] = []
    for message in messages:
        try:
            dispatcher.send(message.task, message.args)
        except Exception as exc:
            logger.warning("outbox: %s not sent (%s); the sweeper will retry", message, exc)
            _note_failure(message, exc)
            break
        sent.append(message.pk)
    if sent:
        try:
            OutboxMessage.objects.filter(pk__in=sent).delete()
        except DatabaseError:  # sent again later: every task is idempotent by its ids
            logger.warning("outbox: %d sent messages could not be deleted", len(sent))
    return len(sent)


def _note_failure(message: OutboxMessage, exc: Exception) -> None:
    with contextlib.suppress(DatabaseError):
        OutboxMessage.objects.filter(pk=message.pk).update(
            last_error=f"{type(exc).__name__}: {exc}"[:500]
        )


def resend_unsent(now: datetime, limit: int = SWEEP_BATCH) -> int:
    """Send the outbox rows that are due, each claimed first by moving its `available_at` on
    (two sweepers never send one twice; a dead sender's row comes back after that delay)."""
    retry_at = now + timedelta(seconds=settings.OUTBOX_RESEND_SECONDS)
    with transaction.atomic():
        ids = list(
            OutboxMessage.objects.available(now)
            .select_for_update(skip_locked=True)
            .values_list("pk", flat=True)[:limit]
        )
        OutboxMessage.objects.filter(pk__in=ids).update(
            available_at=retry_at, attempts=F("attempts") + 1
        )
    return relay(ids)


def dispatch_due(
    now: datetime | None = None, workflow_id: int | None = None, limit: int = SWEEP_BATCH
) -> int:
    """Claim due queued runs (queued → running, one winner each) and send them; return count."""
    now = now or clock.now()
    # An agent's own coordinator runs its queued retries itself.
    due = (
        Run.objects.due(now)
        .filter(workflow__isnull=False, workflow__coordinator=Coordinator.BUILT_IN)
        .exclude(workflow__capability="")
    )
    if workflow_id:
        due = due.filter(workflow_id=workflow_id)
    sent = 0
    for pk in due.order_by("due_at", "pk").values_list("pk", flat=True)[:limit]:
        with transaction.atomic(savepoint=False):
            if Run.objects.filter(pk=pk).claim_due(now):
                run(pk)
                sent += 1
    return sent


def resend_lost(now: datetime, limit: int = SWEEP_BATCH) -> int:
    """Send again the runs sent longer than LOST_DISPATCH_SECONDS ago that never started."""
    sent = 0
    lost = Run.objects.lost_dispatches(now - lost_dispatch_window())
    for pk in lost.values_list("pk", flat=True)[:limit]:
        with transaction.atomic():
            if (
                Run.objects.filter(pk=pk)
                .lost_dispatches(now - lost_dispatch_window())
                .update(dispatched_at=now)
            ):
                run(pk)
                sent += 1
    return sent


def take_back_expired(now: datetime, limit: int = SWEEP_BATCH) -> int:
    """Take back the runs whose lease ran out (a dead worker) and send each a new delivery."""
    sent = 0
    for pk in Run.objects.lease_expired(now).values_list("pk", flat=True)[:limit]:
        with transaction.atomic():
            if Run.objects.filter(pk=pk).take_back(now):
                logger.warning("run %s: its lease ran out; sent for a new delivery", pk)
                run(pk)
                sent += 1
    return sent


def nudge_stalled(now: datetime, limit: int = SWEEP_BATCH) -> int:
    """Step each workflow that has something due and was untouched for NUDGE_SECONDS, once per
    window (the nudge moves its `updated_at`)."""
    before = now - nudge_window()
    stalled = Workflow.objects.needing_step().filter(updated_at__lt=before)
    sent = 0
    for pk in stalled.values_list("pk", flat=True)[:limit]:
        with transaction.atomic():
            if Workflow.objects.filter(pk=pk, updated_at__lt=before).update(updated_at=now):
                step(pk)
                sent += 1
    return sent


def sweep(now: datetime | None = None) -> int:
    """Run the beat's safety nets; return how many messages were sent."""
    now = now or clock.now()
    sent = resend_unsent(now)
    sent += dispatch_due(now)
    sent += resend_lost(now)
    sent += take_back_expired(now)
    sent += nudge_stalled(now)
    return sent
