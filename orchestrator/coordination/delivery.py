"""Resolutions delivered back to the agents that reported the runs: the shape an agent reads, and
signed webhooks to a token's callback URL, exactly once (whichever comes first, an ack or a 2xx).

A delivery is written with its outbox message in the resolving transaction; each attempt takes the
delivery's lease, and one that died with its worker is made again with the same delivery id.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
from datetime import datetime, timedelta
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.dispatch import receiver

from orchestrator.coordination import clock, dispatch
from orchestrator.coordination.execution import holder_is_dead, lease_owner
from orchestrator.coordination.registry import registry
from orchestrator.models import ReviewItem, WebhookDelivery, review_resolved

logger = logging.getLogger(__name__)

DELIVER_TASK = "orchestrator.tasks.deliver_resolution"
SIGNATURE_HEADER = "Failsight-Signature"
DELIVERY_HEADER = "Failsight-Delivery"
EVENT_HEADER = "Failsight-Event"
EVENT = "review.resolved"
# The lease of one attempt outlives its timeout by this much (the answer is being recorded).
LEASE_MARGIN_SECONDS = 10.0


def resolution_payload(item: ReviewItem) -> dict[str, Any]:
    """The review item as `GET /api/v1/reviews/{id}` answers and a webhook posts it."""
    return {
        "id": item.pk,
        "state": item.state,
        "run": item.run_id,
        "workflow": item.workflow_id,
        "reason": item.reason,
        "resolution": _resolution(item) if item.state == ReviewItem.State.RESOLVED else None,
        "delivered_at": _iso(item.delivered_at),
    }


def _resolution(item: ReviewItem) -> dict[str, Any]:
    res = item.resolution
    run = item.run
    reclassified = item.failure_type if item.failure_type != run.failure_type else None
    return {
        "action": res,
        "input": item.edited_input if res == ReviewItem.Resolution.RETRY_EDITED else None,
        "source": switch_target(item) if res == ReviewItem.Resolution.SWITCH_SOURCE else None,
        "failure_type": reclassified,
        "note": item.note,
        "resolved_by": item.resolved_by.get_username() if item.resolved_by else None,
        "resolved_at": _iso(item.resolved_at),
    }


def switch_target(item: ReviewItem) -> str | None:
    """The source a switch goes to, by the rule the operator was shown (`review._switch`)."""
    run, wf = item.run, item.workflow
    tried = wf.sources_tried(run.topic) if wf is not None else {run.source}
    suggestions = [a for a in run.alternatives if isinstance(a, str)]
    capability = run.capability or (wf.capability if wf is not None else "")
    target, _ = registry().switch_target(
        run.source, tried | {run.source}, suggestions, capability=capability or None
    )
    return target


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """`Failsight-Signature`'s value: t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


@receiver(review_resolved, dispatch_uid="coordination.delivery.queue_webhook")
def queue_webhook(sender: Any, item: ReviewItem, **kwargs: Any) -> None:
    if item.is_built_in or item.token_id is None:
        return
    token = item.token
    if not token.callback_url or not token.is_active:
        return
    delivery, created = WebhookDelivery.objects.get_or_create(
        item=item, defaults={"token": token, "url": token.callback_url}
    )
    if created:
        dispatch.enqueue(DELIVER_TASK, [delivery.pk])


def attempt_timeout() -> float:
    return float(settings.WEBHOOK_TIMEOUT_SECONDS)


def backoff(attempt: int) -> float:
    base = settings.WEBHOOK_BACKOFF_SECONDS
    return float(min(settings.WEBHOOK_BACKOFF_MAX_SECONDS, base * 2 ** (attempt - 1)))


def deliver(delivery_id: int) -> str:
    """Make one attempt of a delivery, unless it is settled or an attempt alive holds it."""
    delivery = (
        WebhookDelivery.objects.select_related("item", "token").filter(pk=delivery_id).first()
    )
    if delivery is None or delivery.state != WebhookDelivery.State.PENDING:
        return "skipped"
    now = clock.now()
    if delivery.item.is_delivered:
        delivery.supersede(now)
        return "superseded"
    holder = delivery.lease_owner
    dead = holder if holder and holder_is_dead(holder) else ""
    until = now + timedelta(seconds=attempt_timeout() + LEASE_MARGIN_SECONDS)
    number = delivery.begin_attempt(lease_owner(), now, until, dead)
    if not number:
        return "skipped"
    status, error = post(delivery)
    finished = clock.now()
    if status is not None and 200 <= status < 300:
        delivery.succeed(number, status, finished)
        return "delivered"
    return _after_failure(delivery, number, status, error, finished)


def post(delivery: WebhookDelivery) -> tuple[int | None, str]:
    """POST the resolution, signed; return (the status code, or None, and what went wrong)."""
    item = ReviewItem.objects.select_related("run", "workflow", "resolved_by").get(
        pk=delivery.item_id
    )
    body = encode(resolution_payload(item))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Failsight-Webhook/1",
        EVENT_HEADER: EVENT,
        DELIVERY_HEADER: str(delivery.delivery_id),
        SIGNATURE_HEADER: signature(delivery.token.signing_secret(), int(time.time()), body),
    }
    try:
        response = httpx.post(
            delivery.url, content=body, headers=headers, timeout=attempt_timeout()
        )
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    if 200 <= response.status_code < 300:
        return response.status_code, ""
    return response.status_code, f"HTTP {response.status_code}: {response.text[:200]}"


def _after_failure(
    delivery: WebhookDelivery, number: int, status: int | None, error: str, now: datetime
) -> str:
    with transaction.atomic():
        delivery.fail(number, status, error, now)
        if number >= settings.WEBHOOK_MAX_ATTEMPTS:
            delivery.give_up(now)
            logger.warning("webhook %s: gave up after %d attempts", delivery.pk, number)
            return "given up"
        dispatch.enqueue(DELIVER_TASK, [delivery.pk], delay=backoff(number))
    return "retrying"


def resend_stalled(now: datetime | None = None, limit: int = dispatch.SWEEP_BATCH) -> int:
    """Send again the deliveries whose attempt died with its worker, each claimed for one resend
    window first."""
    now = now or clock.now()
    window = now + timedelta(seconds=attempt_timeout() + LEASE_MARGIN_SECONDS)
    sent = 0
    for pk in WebhookDelivery.objects.stalled(now).values_list("pk", flat=True)[:limit]:
        with transaction.atomic():
            claimed = (
                WebhookDelivery.objects.stalled(now)
                .filter(pk=pk)
                .update(lease_until=window, lease_owner="")
            )
            if claimed:
                logger.warning("webhook %s: its attempt died with its worker; sent again", pk)
                dispatch.enqueue(DELIVER_TASK, [pk])
                sent += 1
    return sent
