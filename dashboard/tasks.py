"""The dashboard's Celery tasks: folding run rollups and failure groups, evaluating alert rules,
delivering webhooks.

Tasks take ids, fetch, do one thing and return. Deliveries are enqueued after commit so a worker
never looks for a row that is not visible yet.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import httpx
from celery import shared_task
from django.db import transaction
from django.db.models import Count, Q
from django.urls import reverse
from django.utils import timezone

from dashboard import groups
from dashboard.models import AlertDelivery, AlertRule
from dashboard.stats import FAILURE_STATUSES, rollup_lookback
from dashboard.stats import refresh_rollups as refresh
from orchestrator.models import ReviewItem, Run

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT = httpx.Timeout(5.0, connect=3.0)
MAX_DELIVERY_ATTEMPTS = 6

__all__ = ["deliver_alert", "evaluate_alerts", "fold_failure_groups", "refresh_rollups"]


@shared_task(ignore_result=True)
def refresh_rollups(hours: int | None = None) -> int:
    """Recompute the last few complete hours (runs change status after they are created) and
    the six-hour blocks that hold them."""
    lookback = timedelta(hours=hours) if hours else rollup_lookback()
    return refresh(timezone.now() - lookback)


@shared_task(ignore_result=True)
def fold_failure_groups(hours: int | None = None) -> int:
    """Recompute the failure groups' last few hours (runs change after they are created)."""
    return groups.fold(timezone.now() - timedelta(hours=hours) if hours else None)


# ---------------------------------------------------------------------------------------------
# Alerts


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


def review_age() -> float:
    oldest = ReviewItem.objects.open().values_list("created_at", flat=True).first()
    return (timezone.now() - oldest).total_seconds() if oldest else 0.0


def measure(rule: AlertRule) -> tuple[float, dict[str, Any]]:
    """The rule's current value, with the facts that go into the webhook's payload."""
    if rule.kind == AlertRule.Kind.FAILURE_RATE:
        rate, finished = failure_rate(rule.failure_type, rule.window_minutes)
        return rate, {"failure_type": rule.failure_type, "finished_runs": finished}
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


@shared_task(ignore_result=True)
def evaluate_alerts() -> int:
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
            deliver_alert.delay_on_commit(delivery.pk)
        fired += 1
    return fired


@shared_task(
    bind=True,
    ignore_result=True,
    autoretry_for=(httpx.HTTPError,),
    retry_backoff=5,
    retry_backoff_max=300,
    retry_jitter=True,
    max_retries=MAX_DELIVERY_ATTEMPTS - 1,
)
def deliver_alert(self: Any, delivery_id: int) -> str:
    """POST one delivery's payload; a network error or a 5xx retries with backoff."""
    delivery = AlertDelivery.objects.select_related("rule").filter(pk=delivery_id).first()
    if delivery is None or delivery.status == AlertDelivery.Status.SENT:
        return "skipped"
    AlertDelivery.objects.filter(pk=delivery.pk).update(attempts=delivery.attempts + 1)
    try:
        response = httpx.post(delivery.rule.url, json=delivery.payload, timeout=WEBHOOK_TIMEOUT)
        if response.status_code >= 500:
            response.raise_for_status()
    except httpx.HTTPError as exc:
        code = exc.response.status_code if isinstance(exc, httpx.HTTPStatusError) else None
        _record(delivery, AlertDelivery.Status.FAILED, code, f"{type(exc).__name__}: {exc}")
        raise
    ok = response.is_success
    status = AlertDelivery.Status.SENT if ok else AlertDelivery.Status.FAILED
    # A 4xx will not get better by retrying the same request: record it and stop.
    _record(delivery, status, response.status_code, "" if ok else response.text[:500])
    return status


def _record(delivery: AlertDelivery, status: str, code: int | None, error: str) -> None:
    AlertDelivery.objects.filter(pk=delivery.pk).update(
        status=status,
        response_code=code,
        error=error[:2000],
        sent_at=timezone.now() if status == AlertDelivery.Status.SENT else None,
    )
