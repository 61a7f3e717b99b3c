"""Outbound webhooks, the one deliverer: review resolutions to agents' callback URLs and fired
alerts to their rules' URLs, signed, tried again with one backoff policy, each attempt recorded.

A delivery is written with its outbox message in the caller's transaction, so a broker outage
delays it and never loses it; an attempt that died with its worker is made again with the same
`Failsight-Delivery` id, which the receiver dedupes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import random
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction

from orchestrator.coordination import clock, dispatch
from orchestrator.coordination.execution import holder_is_dead, lease_owner
from orchestrator.models import WebhookDelivery

logger = logging.getLogger(__name__)

DELIVER_TASK = dispatch.DELIVER_TASK
SIGNATURE_HEADER = "Failsight-Signature"
DELIVERY_HEADER = "Failsight-Delivery"
EVENT_HEADER = "Failsight-Event"
# The lease of one attempt outlives its timeout by this much (the answer is being recorded).
LEASE_MARGIN_SECONDS = 10.0
# Client errors that say "later", not "never": request timeout, too early, too many requests.
RETRYABLE_CLIENT_ERRORS = frozenset({408, 425, 429})


def encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """`Failsight-Signature`'s value: t=<unix>,v1=<hex HMAC-SHA256 of "<t>.<body>">."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def backoff(attempt: int) -> float:
    """Return the seconds before the attempt after `attempt`: doubling, capped, less up to half
    at random so that many deliveries to one receiver do not come back together."""
    base = settings.WEBHOOK_BACKOFF_SECONDS
    ceiling = min(settings.WEBHOOK_BACKOFF_MAX_SECONDS, base * 2 ** (attempt - 1))
    return ceiling * random.uniform(0.5, 1.0)


def attempt_timeout() -> float:
    return float(settings.WEBHOOK_TIMEOUT_SECONDS)


@dataclass(frozen=True)
class Answer:
    """What one attempt got: the receiver's status code (None: no answer) and what went wrong."""

    status: int | None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def final(self) -> bool:
        """A client error the same request will meet again."""
        return (
            self.status is not None
            and 400 <= self.status < 500
            and (self.status not in RETRYABLE_CLIENT_ERRORS)
        )


# Writing a delivery with its outbox message: `dispatch.queue_webhook`.
queue = dispatch.queue_webhook


def deliver(delivery_id: int) -> str:
    """Make one attempt of a delivery, unless it is settled or an attempt alive holds it; return
    what happened (delivered, retrying, given up, superseded, skipped)."""
    delivery = WebhookDelivery.objects.select_related("item").filter(pk=delivery_id).first()
    if delivery is None or delivery.state != WebhookDelivery.State.PENDING:
        return "skipped"
    now = clock.now()
    if delivery.picked_up_elsewhere:
        delivery.supersede(now)
        return "superseded"
    holder = delivery.lease_owner
    dead = holder if holder and holder_is_dead(holder) else ""
    until = now + timedelta(seconds=attempt_timeout() + LEASE_MARGIN_SECONDS)
    number = delivery.begin_attempt(lease_owner(), now, until, dead)
    if not number:
        return "skipped"
    answer = post(delivery)
    finished = clock.now()
    if answer.ok:
        delivery.succeed(number, answer.status, finished)
        return "delivered"
    return _after_failure(delivery, number, answer, finished)


def post(delivery: WebhookDelivery) -> Answer:
    """POST the delivery's payload, signed with its secret (unsigned when its target has none:
    a signature under an empty key would prove nothing)."""
    body = encode(delivery.payload)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Failsight-Webhook/1",
        EVENT_HEADER: delivery.event,
        DELIVERY_HEADER: str(delivery.delivery_id),
    }
    if secret := delivery.signing_secret():
        headers[SIGNATURE_HEADER] = signature(secret, int(time.time()), body)
    try:
        response = httpx.post(
            delivery.url, content=body, headers=headers, timeout=attempt_timeout()
        )
    except httpx.HTTPError as exc:
        return Answer(None, f"{type(exc).__name__}: {exc}")
    if 200 <= response.status_code < 300:
        return Answer(response.status_code)
    return Answer(response.status_code, f"HTTP {response.status_code}: {response.text[:200]}")


def _after_failure(delivery: WebhookDelivery, number: int, answer: Answer, now: datetime) -> str:
    with transaction.atomic():
        delivery.fail(number, answer.status, answer.error, now)
        if answer.final or number >= settings.WEBHOOK_MAX_ATTEMPTS:
            delivery.give_up(now)
            logger.warning("webhook %s: gave up after %d attempts", delivery.pk, number)
            return "given up"
        dispatch.enqueue(DELIVER_TASK, [delivery.pk], delay=backoff(number))
    return "retrying"


def resend_stalled(now: datetime | None = None, limit: int = dispatch.SWEEP_BATCH) -> int:
    """Send again the deliveries whose attempt died with its worker, each claimed first."""
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
