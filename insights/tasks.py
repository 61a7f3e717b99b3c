"""The insights Celery tasks: folding counts and failure groups, evaluating alert rules, retention.
Each takes ids (or nothing), calls one function of its module, and returns."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import shared_task
from django.utils import timezone

from insights import alerts, costs, groups, minutes, observations, retention, stats


@shared_task(ignore_result=True)
def refresh_rollups(hours: int | None = None) -> int:
    """Recompute the last few complete hours (runs change status after they are created)."""
    lookback = timedelta(hours=hours) if hours else stats.rollup_lookback()
    return stats.refresh_rollups(timezone.now() - lookback)


@shared_task(ignore_result=True)
def fold_minutes() -> int:
    """Move the run deltas the triggers appended into the minute rollups and running totals."""
    return minutes.fold()


@shared_task(ignore_result=True)
def fold_observations() -> int:
    """Recompute /metrics' histograms and event counters of the last hours."""
    return observations.fold()


@shared_task(ignore_result=True)
def fold_failure_groups(hours: int | None = None) -> int:
    """Recompute the failure groups' last few hours (runs change after they are created)."""
    return groups.fold(timezone.now() - timedelta(hours=hours) if hours else None)


@shared_task(ignore_result=True)
def warm_costs() -> list[str]:
    """Compute the Costs page's reports whose cached ones are stale (the pages seldom wait)."""
    return costs.warm()


@shared_task(ignore_result=True)
def evaluate_alerts() -> int:
    """Fire every enabled rule whose threshold is crossed (once per cool-down)."""
    return alerts.evaluate()


@shared_task(ignore_result=True)
def apply_retention() -> dict[str, Any]:
    """Drop runs past RUNS_RETENTION_DAYS and rollups past ROLLUP_RETENTION_DAYS."""
    pruned = retention.apply()
    return {"partitions": pruned.partitions, "rollup_rows": pruned.rollup_rows}
