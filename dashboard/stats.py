"""Counting runs for the tiles and /metrics without scanning the run table.

Complete hours come from `RunRollup` (folded by a periodic task with one GROUP BY over the indexed
`created_at` range); the current, partial hour is counted live with the same GROUP BY. The 1-hour
window is small enough to be counted live entirely, at minute resolution.

Definitions (the issue leaves them open; the README repeats them):
- a *failure* is a run whose status is failed or escalated;
- *retries spent* are runs that are retries (`retry_of` set); a *wasted* retry is one that failed;
- *retries avoided* are failures the coordinator answered with switch_source, escalate, abort or
  accept_partial: a blind policy that retries every failure would have spent a retry on each;
- an *early* retry started before its due time (`started_at < due_at`), i.e. before the
  provider's Retry-After had passed;
- a *switched* run is one the coordinator started on the next source after a switch_source
  decision (`switched_from` set).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import (
    Count,
    DateTimeField,
    F,
    Func,
    Q,
    QuerySet,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce, Trunc
from django.utils import timezone

from dashboard.models import RunRollup
from orchestrator.models import Action, Run

FAILURE_STATUSES = (Run.Status.FAILED, Run.Status.ESCALATED)
AVOIDING_DECISIONS = (Action.SWITCH_SOURCE, Action.ESCALATE, Action.ABORT, Action.ACCEPT_PARTIAL)
METRICS = (
    "count",
    "partial_runs",
    "partial_items",
    "empty_runs",
    "retries",
    "early_retries",
    "switched",
    "avoided_retries",
)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


# ---------------------------------------------------------------------------------------------
# The one GROUP BY, shared by the rollup task and the live queries


def switched_condition() -> Q:
    """Runs the coordinator started on another source after a switch_source decision."""
    return Q(switched_from__isnull=False)


def _metric_aggregates() -> dict[str, Any]:
    is_retry = Q(retry_of__isnull=False)
    failed = Q(status__in=FAILURE_STATUSES)
    return {
        "count": Count("id"),
        "partial_runs": Count("id", filter=failed & Q(partial_count__gt=0)),
        "partial_items": Coalesce(Sum("partial_count", filter=failed), Value(0)),
        "empty_runs": Count("id", filter=Q(status=Run.Status.SUCCEEDED, result_count=0)),
        "retries": Count("id", filter=is_retry),
        "early_retries": Count("id", filter=is_retry & Q(started_at__lt=F("due_at"))),
        "switched": Count("id", filter=switched_condition()),
        "avoided_retries": Count("id", filter=failed & Q(decision__in=AVOIDING_DECISIONS)),
    }


def grouped_runs(start: datetime, end: datetime, unit: str) -> QuerySet:
    """Runs created in [start, end) grouped by (bucket, status, failure_type, source)."""
    return (
        Run.objects.filter(created_at__gte=start, created_at__lt=end)
        .annotate(bucket=Trunc("created_at", unit, tzinfo=UTC))
        .values("bucket", "status", "failure_type", "source")
        .annotate(**_metric_aggregates())
        .order_by()
    )


def floor_hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def refresh_rollups(start: datetime, end: datetime | None = None) -> int:
    """Recompute the rollups of the complete hours in [start, end); return the rows written.

    The current hour is never stored (it is counted live), so a rollup row is final once written
    unless a run created in that hour changes status later: the periodic task therefore
    recomputes the last few hours, not just the last one.
    """
    end = min(floor_hour(end or timezone.now()), floor_hour(timezone.now()))
    start = floor_hour(start)
    if start >= end:
        return 0
    rows = [
        RunRollup(
            hour=g["bucket"],
            status=g["status"],
            failure_type=g["failure_type"] or "",
            source=g["source"],
            **{m: g[m] for m in METRICS},
        )
        for g in grouped_runs(start, end, "hour")
    ]
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # Two overlapping refreshes would both delete, then collide on the unique key.
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(hashtext('dashboard_rollups'))")
        RunRollup.objects.filter(hour__gte=start, hour__lt=end).delete()
        RunRollup.objects.bulk_create(rows, batch_size=2000)
    return len(rows)


def rollup_lookback() -> timedelta:
    return timedelta(hours=getattr(settings, "DASHBOARD_ROLLUP_LOOKBACK_HOURS", 3))


# ---------------------------------------------------------------------------------------------
# Windows


@dataclass(frozen=True)
class Window:
    """A tile window: `units` steps of `unit` ending with the current (partial) step."""

    name: str
    label: str
    unit: timedelta
    units: int
    per_bucket: int

    def bounds(self, now: datetime) -> tuple[datetime, datetime, datetime]:
        """Return (previous window start, current window start, anchor = start of current step)."""
        now = now.astimezone(UTC)
        anchor = floor_hour(now) if self.unit == HOUR else now.replace(second=0, microsecond=0)
        start = anchor - (self.units - 1) * self.unit
        return start - self.units * self.unit, start, anchor

    @property
    def buckets(self) -> int:
        return self.units // self.per_bucket


WINDOWS = {
    "1h": Window("1h", "last hour", MINUTE, 60, 5),
    "24h": Window("24h", "last 24 hours", HOUR, 24, 1),
    "7d": Window("7d", "last 7 days", HOUR, 168, 6),
}
DEFAULT_WINDOW = "24h"


def get_window(name: str | None) -> Window:
    return WINDOWS.get(name or "", WINDOWS[DEFAULT_WINDOW])


@dataclass
class Totals:
    """Metric sums for one window, split by status, failure type and (failure type, source)."""

    by_status: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    by_type: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    metric: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    switched_ok: int = 0
    switched_done: int = 0
    wasted: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))

    def add(self, row: dict[str, Any]) -> None:
        status, ftype = row["status"], row["failure_type"] or ""
        self.by_status[status] += row["count"]
        if ftype:
            self.by_type[ftype] += row["count"]
        for m in METRICS:
            self.metric[m] += row[m] or 0
        if status == Run.Status.SUCCEEDED:
            self.switched_ok += row["switched"]
        if status == Run.Status.SUCCEEDED or status in FAILURE_STATUSES:
            self.switched_done += row["switched"]
        if "source" in row and status in FAILURE_STATUSES and row["retries"]:
            self.wasted[(ftype or "unknown", row["source"])] += row["retries"]

    @property
    def runs(self) -> int:
        return self.metric["count"]

    @property
    def failures(self) -> int:
        return sum(self.by_status[s] for s in FAILURE_STATUSES)

    @property
    def finished(self) -> int:
        return self.by_status[Run.Status.SUCCEEDED] + self.failures

    @property
    def wasted_total(self) -> int:
        return sum(self.wasted.values())


@dataclass
class WindowStats:
    window: Window
    start: datetime
    previous: Totals
    current: Totals
    # per failure type (and "" for all runs), one count per bucket of the current window
    series: dict[str, list[int]]


def window_stats(window: Window, now: datetime | None = None) -> WindowStats:
    """Sum the rollups and the live partial step for the current and the previous window."""
    now = now or timezone.now()
    prev_start, start, anchor = window.bounds(now)
    stats = WindowStats(
        window, start, Totals(), Totals(), defaultdict(lambda: [0] * window.buckets)
    )
    if window.unit == HOUR:
        # The previous window only needs totals: grouping it by hour would double the work.
        rows = [
            *_rollup_rows(prev_start, start, by_hour=False),
            *_rollup_rows(start, anchor, bucket_hours=window.per_bucket),
        ]
        for ftype, source, n in _rollup_wasted(start, anchor):
            stats.current.wasted[(ftype or "unknown", source)] += n
        live = grouped_runs(anchor, anchor + HOUR, "hour")
    else:
        rows = []
        live = grouped_runs(prev_start, anchor + MINUTE, "minute")
    for row in [*rows, *live]:
        bucket_time = row["bucket"]
        if bucket_time < start:
            stats.previous.add(row)
            continue
        stats.current.add(row)
        index = int((bucket_time - start) / window.unit) // window.per_bucket
        index = min(index, window.buckets - 1)
        stats.series[""][index] += row["count"]
        if row["failure_type"]:
            stats.series[row["failure_type"]][index] += row["count"]
    return stats


class DateBin(Func):
    """PostgreSQL's date_bin(stride, source, origin): the start of the stride-long bin."""

    function = "date_bin"
    output_field = DateTimeField()


def _rollup_rows(
    start: datetime, end: datetime, by_hour: bool = True, bucket_hours: int = 1
) -> list[dict[str, Any]]:
    """Return rollup sums per sparkline bucket (or one row per key for by_hour=False).

    Summed over sources in SQL. On PostgreSQL the hours are also binned into the window's
    buckets there (a 7-day window: 28 bins instead of 168 hours), because turning every hourly
    row into Python objects cost more than the query itself; elsewhere rows stay hourly and the
    caller bins them.
    """
    qs = RunRollup.objects.filter(hour__gte=start, hour__lt=end)
    keys: tuple[str, ...] = ("status", "failure_type")
    if by_hour:
        if bucket_hours > 1 and connection.vendor == "postgresql":
            stride = Value(timedelta(hours=bucket_hours))
            qs = qs.annotate(bucket=DateBin(stride, F("hour"), Value(start)))
        else:
            qs = qs.annotate(bucket=F("hour"))
        keys = ("bucket", *keys)
    rows = qs.values_list(*keys).annotate(*[Sum(m) for m in METRICS]).order_by()
    if by_hour:
        return [dict(zip((*keys, *METRICS), r, strict=True)) for r in rows]
    return [{"bucket": start, **dict(zip((*keys, *METRICS), r, strict=True))} for r in rows]


def _rollup_wasted(start: datetime, end: datetime) -> QuerySet:
    """Wasted retries per (failure type, source) over complete hours."""
    return (
        RunRollup.objects.filter(
            hour__gte=start, hour__lt=end, status__in=FAILURE_STATUSES, retries__gt=0
        )
        .values_list("failure_type", "source")
        .annotate(n=Sum("retries"))
        .order_by()
    )


def all_time_counts(now: datetime | None = None) -> dict[tuple[str, str, str], int]:
    """Runs ever recorded per (status, failure_type, source): rollups plus the live hour."""
    anchor = floor_hour(now or timezone.now())
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    summed = (
        RunRollup.objects.filter(hour__lt=anchor)
        .values_list("status", "failure_type", "source")
        .annotate(n=Sum("count"))
        .order_by()
    )
    for status, ftype, source, n in summed:
        counts[(status, ftype, source)] += n
    for g in grouped_runs(anchor, anchor + HOUR, "hour"):
        counts[(g["status"], g["failure_type"] or "", g["source"])] += g["count"]
    return counts
