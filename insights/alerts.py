"""Alert rules: measuring each rule, firing it once per cool-down, and posting its webhook.

A rule measures a failure rate over a window, the age of the oldest open review item, or an SLO's
burn rate (`slo`). A fired rule writes its delivery and the outbox message that sends it in one
transaction (`orchestrator.coordination.dispatch`), so a broker outage delays an alert and never
loses it.
"""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import httpx
from django.db import transaction
from django.db.models import Count, Q
from django.urls import reverse
from django.utils import timezone

from insights import slo
from insights.models import AlertDelivery, AlertRule
from insights.stats import FAILURE_STATUSES
from orchestrator.coordination import dispatch
from orchestrator.models import ReviewItem, Run

WEBHOOK_TIMEOUT = httpx.Timeout(5.0, connect=3.0)
MAX_DELIVERY_ATTEMPTS = 6
RETRY_BASE_DELAY = 5.0
RETRY_MAX_DELAY = 300.0
DELIVER_TASK = "insights.tasks.deliver_alert"


def failure_rate(failure_type: str, minutes: int) -> tuple[float, int]:
    """(share of finished runs that failed with this type, finished runs) over the last minutes.

    Counted live: alert windows are short and `created_at` is indexed.
    """
    since = timezone.now() - timedelta(minutes=minutes)
    counts = Run.objects.filter(created_at__gte=since).aggregate(
        finished=Count("id", filter=Q(status__in=[Run.Status.SUCCEEDED, *FAILURE_STATUSES])),
        failed=Count("id", filter=Q(status__in=FAILURE_STATUSES, failure_type=failure_type)),
    )
    finished = counts["finished"]
    return (counts["failed"] / finished if finished else 0.0), finished


def slo_burn(long_minutes: int, rate: float) -> tuple[float, dict[str, Any]]:
    """The worst burn rate both windows of the pair share, and the objectives burning."""
    worst, found = slo.burning(long_minutes, rate)
    short = slo.short_of(long_minutes)
    burning = [
        {
            "kind": o.kind,
            "name": o.name,
            "objective": o.objective,
            f"burn_rate_{long_minutes}m": round(o.burn_rate(long_minutes), 2),
            f"burn_rate_{short}m": round(o.burn_rate(short), 2),
        }
        for o in found
    ]
    return worst, {
        "long_window_minutes": long_minutes,
        "short_window_minutes": short,
        "burning": burning,
    }


def review_age() -> float:
    oldest = ReviewItem.objects.open().values_list("created_at", flat=True).first()
    return (timezone.now() - oldest).total_seconds() if oldest else 0.0


def measure(rule: AlertRule) -> tuple[float, dict[str, Any]]:
    """The rule's current value, with the facts that go into the webhook's payload."""
    if rule.kind == AlertRule.Kind.FAILURE_RATE:
        rate, finished = failure_rate(rule.failure_type, rule.window_minutes)
        return rate, {"failure_type": rule.failure_type, "finished_runs": finished}
    if rule.kind == AlertRule.Kind.SLO_BURN:
        return slo_burn(rule.window_minutes, rule.threshold)
    age = review_age()
    oldest = ReviewItem.objects.open().values_list("pk", flat=True).first()
    facts: dict[str, Any] = {"open_review_items": ReviewItem.objects.open().count()}
    if oldest is not None:
        # The oldest item's own page, where it can be claimed straight away.
        facts["oldest_review_path"] = reverse("dashboard:review_item", args=[oldest])
    return age, facts


def _cooling_down(rule: AlertRule, now: Any) -> bool:
    return bool(
        rule.last_fired_at and now - rule.last_fired_at < timedelta(minutes=rule.cooldown_minutes)
    )


def evaluate() -> int:
    """Fire every enabled rule whose threshold is crossed (once per cool-down); return fired."""
    now = timezone.now()
    fired = 0
    for rule in AlertRule.objects.filter(enabled=True):
        value, facts = measure(rule)
        if value < rule.threshold or _cooling_down(rule, now):
            continue
        with transaction.atomic():
            # Conditional update: two overlapping evaluations fire a rule once.
            claimed = AlertRule.objects.filter(pk=rule.pk, last_fired_at=rule.last_fired_at).update(
                last_fired_at=now
            )
            if not claimed:
                continue
            payload = {
                "alert": rule.name,
                "kind": rule.kind,
                "value": value,
                "threshold": rule.threshold,
                "window_minutes": rule.window_minutes,
                "at": now.isoformat(),
                **facts,
            }
            delivery = AlertDelivery.objects.create(rule=rule, payload=payload)
            dispatch.enqueue(DELIVER_TASK, [delivery.pk])
        fired += 1
    return fired


def deliver(delivery_id: int) -> str:
    """POST one delivery's payload; a network error or a 5xx is tried again later, a 4xx is final.

    The next try is an outbox message with a delay, written with the failure it follows: it
    survives a worker or broker restart, and never waits in a broker countdown.
    """
    delivery = AlertDelivery.objects.select_related("rule").filter(pk=delivery_id).first()
    if delivery is None or delivery.status == AlertDelivery.Status.SENT:
        return "skipped"
    attempts = delivery.attempts + 1
    AlertDelivery.objects.filter(pk=delivery.pk).update(attempts=attempts)
    try:
        response = httpx.post(delivery.rule.url, json=delivery.payload, timeout=WEBHOOK_TIMEOUT)
    except httpx.HTTPError as exc:
        return _try_again_later(delivery, attempts, None, f"{type(exc).__name__}: {exc}")
    if response.status_code >= 500:
        return _try_again_later(delivery, attempts, response.status_code, response.text[:500])
    ok = response.is_success
    status = AlertDelivery.Status.SENT if ok else AlertDelivery.Status.FAILED
    # A 4xx will not get better by retrying the same request: record it and stop.
    _record(delivery, status, response.status_code, "" if ok else response.text[:500])
    return status


def retry_delay(attempts: int) -> float:
    """Seconds before the next try after `attempts` failed ones: doubling from 5 s up to 5 min,
    with jitter so that many deliveries to one receiver do not come back together."""
    ceiling = min(RETRY_MAX_DELAY, RETRY_BASE_DELAY * 2 ** (attempts - 1))
    return ceiling * random.uniform(0.5, 1.0)


def _try_again_later(delivery: AlertDelivery, attempts: int, code: int | None, error: str) -> str:
    with transaction.atomic():
        _record(delivery, AlertDelivery.Status.FAILED, code, error)
        if attempts < MAX_DELIVERY_ATTEMPTS:
            dispatch.enqueue(DELIVER_TASK, [delivery.pk], delay=retry_delay(attempts))
    return AlertDelivery.Status.FAILED


def _record(delivery: AlertDelivery, status: str, code: int | None, error: str) -> None:
    AlertDelivery.objects.filter(pk=delivery.pk).update(
        status=status,
        response_code=code,
        error=error[:2000],
        sent_at=timezone.now() if status == AlertDelivery.Status.SENT else None,
    )
