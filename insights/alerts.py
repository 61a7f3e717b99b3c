"""Alert rules: measuring each rule and firing it once per cool-down; a firing queues its webhook
in the same transaction as the rule's new `last_fired_at`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Count, Q
from django.urls import reverse
from django.utils import timezone

from insights import slo
from insights.models import AlertDelivery, AlertRule
from insights.stats import FAILURE_STATUSES
from orchestrator.coordination import spend, webhooks
from orchestrator.models import ReviewItem, Run, WebhookDelivery


def failure_rate(
    failure_type: str, minutes: int, project_id: int | None = None
) -> tuple[float, int]:
    """(share of finished runs that failed with this type, finished runs) over the last minutes,
    of one project if given, counted live: alert windows are short and `created_at` is indexed."""
    since = timezone.now() - timedelta(minutes=minutes)
    runs = Run.objects.filter(created_at__gte=since)
    if project_id is not None:
        runs = runs.filter(project_id=project_id)
    counts = runs.aggregate(
        finished=Count("id", filter=Q(status__in=[Run.Status.SUCCEEDED, *FAILURE_STATUSES])),
        failed=Count("id", filter=Q(status__in=FAILURE_STATUSES, failure_type=failure_type)),
    )
    finished = counts["finished"]
    return (counts["failed"] / finished if finished else 0.0), finished


def slo_burn(
    long_minutes: int, rate: float, project_id: int | None = None
) -> tuple[float, dict[str, Any]]:
    """The worst burn rate both windows of the pair share, and the objectives burning, over the
    runs of one project if given."""
    projects = None if project_id is None else (project_id,)
    worst, found = slo.burning(long_minutes, rate, projects=projects)
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


def spend_over_budget(threshold: float) -> tuple[float, dict[str, Any]]:
    """The highest share of its daily limit any budgeted source or agent has spent today, and
    the budgets at or past `threshold` of theirs (1: the limit)."""
    found = spend.states()
    worst = max((s.ratio for s in found), default=0.0)
    over = [
        {
            "scope": s.scope,
            "name": s.name,
            "spent_today": str(s.spent),
            "daily_limit": str(s.limit),
            "currency": s.currency,
        }
        for s in found
        if s.ratio >= threshold
    ]
    return worst, {"over_budget": over, "costs_path": reverse("dashboard:costs")}


def review_age(project_id: int | None = None) -> float:
    oldest = _open(project_id).values_list("created_at", flat=True).first()
    return (timezone.now() - oldest).total_seconds() if oldest else 0.0


def _open(project_id: int | None) -> Any:
    items = ReviewItem.objects.open()
    return items if project_id is None else items.filter(project_id=project_id)


def measure(rule: AlertRule) -> tuple[float, dict[str, Any]]:
    """The rule's current value, with the facts that go into the webhook's payload. A failure
    rate, an SLO's burn (objectives are per agent and source, the same in every project) and a
    review age are measured on the rule's project's runs and items; spend budgets are every
    project's (a daily limit is the source's or agent's, whoever calls it)."""
    if rule.kind == AlertRule.Kind.FAILURE_RATE:
        rate, finished = failure_rate(rule.failure_type, rule.window_minutes, rule.project_id)
        return rate, {"failure_type": rule.failure_type, "finished_runs": finished}
    if rule.kind == AlertRule.Kind.SLO_BURN:
        return slo_burn(rule.window_minutes, rule.threshold, rule.project_id)
    if rule.kind == AlertRule.Kind.SPEND_BUDGET:
        return spend_over_budget(rule.threshold)
    age = review_age(rule.project_id)
    oldest = _open(rule.project_id).values_list("pk", flat=True).first()
    facts: dict[str, Any] = {"open_review_items": _open(rule.project_id).count()}
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
    for rule in AlertRule.objects.filter(enabled=True).select_related("project"):
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
                "project": rule.project.slug,
                "at": now.isoformat(),
                **facts,
            }
            webhook = webhooks.queue(
                WebhookDelivery.Event.ALERT_FIRED, rule.url, payload, rule.sealed_signing_secret
            )
            AlertDelivery.objects.create(rule=rule, webhook=webhook, created_at=now)
        fired += 1
    return fired
