"""Counting runs for the tiles and /metrics without scanning the run table: complete hours from the
hourly rollups and their six-hour blocks, the current hour and the 1-hour window from the minute
rollups (`insights.minutes`; live on SQLite). The sets counted are `RunSets`' conditions."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, Count, DateTimeField, F, Q, QuerySet, Sum, Value, When
from django.db.models.functions import Coalesce, Trunc
from django.utils import timezone

from insights.models import (
    MinuteRollup,
    RollupVersion,
    RunDelta,
    RunRollup,
    RunTotal,
    SixHourRollup,
    SixHourWastedRetries,
)
from orchestrator import counters
from orchestrator.models import Run, RunSets

FAILURE_STATUSES = Run.FAILURE
METRICS = (
    "count",
    "partial_runs",
    "partial_items",
    "empty_runs",
    "retries",
    "early_retries",
    "switched",
    "avoided_retries",
    "futile_retries",
)
KEYS = ("status", "failure_type", "source")
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
BLOCK_HOURS = 6
BLOCK = BLOCK_HOURS * HOUR


# The one GROUP BY, shared by the rollup task and the live queries


def metric_aggregates() -> dict[str, Any]:
    failures = RunSets.FAILURES
    return {
        "count": Count("id"),
        "partial_runs": Count("id", filter=RunSets.PARTIAL),
        "partial_items": Coalesce(Sum("partial_count", filter=failures), Value(0)),
        "empty_runs": Count("id", filter=RunSets.VALID_EMPTY),
        "retries": Count("id", filter=RunSets.RETRIES),
        "early_retries": Count("id", filter=RunSets.EARLY_RETRIES),
        "switched": Count("id", filter=RunSets.SWITCHED),
        "avoided_retries": Count("id", filter=RunSets.AVOIDED_RETRIES),
        "futile_retries": Count("id", filter=RunSets.FUTILE_RETRIES),
    }


def grouped_runs(
    start: datetime, end: datetime, unit: str, projects: tuple[int, ...] | None = None
) -> QuerySet:
    """Runs created in [start, end) grouped by (bucket, status, failure_type, source); of
    `projects` only, if given."""
    runs = Run.objects.filter(created_at__gte=start, created_at__lt=end)
    if projects is not None:
        runs = runs.filter(project_id__in=projects)
    return (
        runs.annotate(bucket=Trunc("created_at", unit, tzinfo=UTC))
        .values("bucket", "status", "failure_type", "source")
        .annotate(**metric_aggregates())
        .order_by()
    )


def floor_hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def refresh_rollups(start: datetime, end: datetime | None = None) -> int:
    """Recompute the rollups (and six-hour blocks) of the complete hours in [start, end); return
    the hourly rows written. The task recomputes the last few hours, as runs change status later."""
    current_hour = floor_hour(timezone.now())
    end = min(floor_hour(end or current_hour), current_hour)
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
    rows.sort(key=lambda r: (r.hour, r.status, r.failure_type, r.source))  # an hour's rows together
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # Two overlapping refreshes would both delete, then collide on the unique key.
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(hashtext('dashboard_rollups'))")
        RunRollup.objects.filter(hour__gte=start, hour__lt=end).delete()
        RunRollup.objects.bulk_create(rows, batch_size=2000)
        _fold_six_hours(start, end, current_hour)
        RollupVersion.bump()
    return len(rows)


def _fold_six_hours(start: datetime, end: datetime, current_hour: datetime) -> None:
    """Recompute the six-hour blocks that overlap the hours [start, end), from the hourly rows; a
    block is stored once its six hours are complete."""
    first = start - BLOCK + HOUR  # the earliest block that overlaps `start`
    last = min(end, current_hour - BLOCK + HOUR)  # blocks from here on are not complete yet
    hourly = RunRollup.objects.filter(
        hour__gte=first, hour__lt=min(end + BLOCK - HOUR, current_hour)
    ).values_list("hour", "status", "failure_type", "source", *METRICS)
    sums: dict[tuple[datetime, str, str], list[int]] = defaultdict(lambda: [0] * len(METRICS))
    wasted: dict[tuple[datetime, str, str], int] = defaultdict(int)
    retries = METRICS.index("retries")
    for hour, status, ftype, source, *values in hourly:
        failed_retries = values[retries] if status in FAILURE_STATUSES else 0
        for offset in range(BLOCK_HOURS):
            block = hour - offset * HOUR
            if first <= block < last:
                acc = sums[(block, status, ftype)]
                for i, value in enumerate(values):
                    acc[i] += value
                if failed_retries:
                    wasted[(block, ftype, source)] += failed_retries
    # Inserted in order, so that the rows of one block share a page.
    SixHourRollup.objects.filter(start__gte=first, start__lt=end).delete()
    SixHourRollup.objects.bulk_create(
        (
            SixHourRollup(
                start=block,
                phase=block_phase(block),
                status=status,
                failure_type=ftype,
                **dict(zip(METRICS, values, strict=True)),
            )
            for (block, status, ftype), values in sorted(sums.items())
        ),
        batch_size=2000,
    )
    SixHourWastedRetries.objects.filter(start__gte=first, start__lt=end).delete()
    SixHourWastedRetries.objects.bulk_create(
        (
            SixHourWastedRetries(
                start=block, phase=block_phase(block), failure_type=ftype, source=source, retries=n
            )
            for (block, ftype, source), n in sorted(wasted.items())
        ),
        batch_size=2000,
    )


def block_phase(start: datetime) -> int:
    """Which of the six non-overlapping tilings of the time line the block from `start` is in."""
    return start.astimezone(UTC).hour % BLOCK_HOURS


def whole_blocks(start: datetime, end: datetime) -> tuple[Q, datetime]:
    """(A filter for the six-hour blocks that tile [start, end) from `start` on, the start of the
    tail under six hours that has no block of its own)."""
    tail = start + max(0, (end - start) // BLOCK) * BLOCK
    return Q(phase=block_phase(start), start__gte=start, start__lt=tail), tail


def rollup_lookback() -> timedelta:
    return timedelta(hours=getattr(settings, "DASHBOARD_ROLLUP_LOOKBACK_HOURS", 3))


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

    def add_to_series(self, bucket_time: datetime, failure_type: str | None, n: int) -> None:
        """Add n runs created from `bucket_time` on to the sparkline bucket holding that time."""
        w = self.window
        index = min(int((bucket_time - self.start) / w.unit) // w.per_bucket, w.buckets - 1)
        self.series[""][index] += n
        if failure_type:
            self.series[failure_type][index] += n


def window_stats(
    window: Window, now: datetime | None = None, projects: tuple[int, ...] | None = None
) -> WindowStats:
    """Sum the rollups and the live partial step for the current and the previous window; no
    query returns a row per hour and key (costlier in Python than in SQL). The rollups count
    every project: for some projects only (`projects`), the runs of the two windows are counted
    from the run table instead (`project_window_stats`)."""
    now = now or timezone.now()
    prev_start, start, anchor = window.bounds(now)
    stats = WindowStats(
        window, start, Totals(), Totals(), defaultdict(lambda: [0] * window.buckets)
    )
    if projects is not None:
        return project_window_stats(stats, prev_start, anchor + window.unit, projects)
    if window.unit == HOUR:
        for row in _block_totals(prev_start, start, anchor):
            (stats.previous if row["bucket"] < start else stats.current).add(row)
        for bucket_time, ftype, n in _rollup_series(window, start, anchor):
            stats.add_to_series(bucket_time, ftype, n)
        for ftype, source, n in _block_wasted(start, anchor):
            stats.current.wasted[(ftype or "unknown", source)] += n
        for row in _tail_rows(prev_start, start, anchor):
            if row["bucket"] < start:
                stats.previous.add(row)
                continue
            stats.current.add(row)  # keyed by source too: adds the tail's wasted retries
            if window.per_bucket == BLOCK_HOURS:  # hourly buckets have them from the series
                stats.add_to_series(row["bucket"], row["failure_type"], row["count"])
        live = _current_hour(anchor)
    else:
        # Both hours are live: totals without a time bucket, the sparkline per minute and type.
        for row in _live_totals(prev_start, start, anchor + MINUTE):
            (stats.previous if row["bucket"] < start else stats.current).add(row)
        for bucket_time, ftype, n in _live_series(start, anchor + MINUTE):
            stats.add_to_series(bucket_time, ftype, n)
        return stats
    for row in live:
        if row["bucket"] < start:
            stats.previous.add(row)
        else:
            stats.current.add(row)
            stats.add_to_series(row["bucket"], row["failure_type"], row["count"])
    return stats


def project_window_stats(
    stats: WindowStats, prev_start: datetime, end: datetime, projects: tuple[int, ...]
) -> WindowStats:
    """`stats` filled from the runs of `projects` created in [prev_start, end): the rollups'
    GROUP BY (`grouped_runs`), by the minute for a window of minutes, else by the hour."""
    unit = "minute" if stats.window.unit == MINUTE else "hour"
    runs = grouped_runs(prev_start, end, unit, projects)
    for row in runs:
        if row["bucket"] < stats.start:
            stats.previous.add(row)
        else:
            stats.current.add(row)
            stats.add_to_series(row["bucket"], row["failure_type"], row["count"])
    return stats


def _current_hour(anchor: datetime) -> Iterable[dict[str, Any]]:
    """Metric sums of the hour from `anchor` per key, from the minute rollups where kept."""
    if not counters.enabled():
        return grouped_runs(anchor, anchor + HOUR, "hour")
    rows = _minute_sums(Q(minute__gte=anchor, minute__lt=anchor + HOUR), KEYS)
    return [{**row, "bucket": anchor} for row in rows]


def _minute_sums(where: Q, keys: tuple[str, ...], **annotations: Any) -> list[dict[str, Any]]:
    """Every metric summed per `keys` over the folded minutes and the pending deltas."""
    sums: dict[tuple, dict[str, Any]] = {}
    for model in (MinuteRollup, RunDelta):
        qs = model.objects.filter(where).annotate(**annotations)
        for row in _sums(qs, keys):
            key = tuple(row[k] for k in keys)
            if key not in sums:
                sums[key] = row
            else:
                for m in METRICS:
                    sums[key][m] += row[m]
    return list(sums.values())


def _live_totals(prev_start: datetime, start: datetime, end: datetime) -> Iterable[dict]:
    """Metric sums of [prev_start, end) per key, bucket = the start of the run's window."""
    if counters.enabled():
        side = _window_side("minute", prev_start, start, start)
        where = Q(minute__gte=prev_start, minute__lt=end)
        return _minute_sums(where, ("bucket", *KEYS), bucket=side)
    return (
        Run.objects.filter(created_at__gte=prev_start, created_at__lt=end)
        .annotate(bucket=_window_side("created_at", prev_start, start, start))
        .values("bucket", "status", "failure_type", "source")
        .annotate(**metric_aggregates())
        .order_by()
    )


def _live_series(start: datetime, end: datetime) -> Iterable[tuple[datetime, str, int]]:
    """(minute, failure type, runs) of the runs created in [start, end)."""
    if counters.enabled():
        rows = _minute_sums(Q(minute__gte=start, minute__lt=end), ("minute", "failure_type"))
        return [(r["minute"], r["failure_type"], r["count"]) for r in rows]
    return (
        Run.objects.filter(created_at__gte=start, created_at__lt=end)
        .annotate(bucket=Trunc("created_at", "minute", tzinfo=UTC))
        .values_list("bucket", "failure_type")
        .annotate(Count("id"))
        .order_by()
    )


def _sums(qs: QuerySet, keys: tuple[str, ...]) -> list[dict[str, Any]]:
    """Sum every metric of rollup rows per `keys`."""
    rows = qs.values_list(*keys).annotate(*[Sum(m) for m in METRICS]).order_by()
    return [dict(zip((*keys, *METRICS), r, strict=True)) for r in rows]


def _window_side(field: str, prev_start: datetime, start: datetime, current: datetime) -> Case:
    """`prev_start` for a time before `start` (the previous window), else `current`."""
    return Case(
        When(**{f"{field}__lt": start}, then=Value(prev_start)),
        default=Value(current),
        output_field=DateTimeField(),
    )


def _block_totals(prev_start: datetime, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """Metric sums per status and failure type of the whole six-hour blocks of both windows,
    with bucket = the window's start; one query (a UNION ALL got a slower parallel plan)."""
    qs = SixHourRollup.objects.filter(
        whole_blocks(prev_start, start)[0] | whole_blocks(start, end)[0]
    )
    qs = qs.annotate(bucket=_window_side("start", prev_start, start, start))
    return _sums(qs, ("bucket", "status", "failure_type"))


def _tail_rows(prev_start: datetime, start: datetime, end: datetime) -> list[dict[str, Any]]:
    """Metric sums per status, failure type and source of the hours after each window's last
    whole block, with bucket = the previous window's start or the current window's tail start."""
    prev_tail = whole_blocks(prev_start, start)[1]
    tail = whole_blocks(start, end)[1]
    hours = Q(hour__gte=tail, hour__lt=end)
    if prev_tail < start:  # not for a day or a week: both are whole blocks
        hours |= Q(hour__gte=prev_tail, hour__lt=start)
    qs = RunRollup.objects.filter(hours).annotate(
        bucket=_window_side("hour", prev_start, start, tail)
    )
    return _sums(qs, ("bucket", "status", "failure_type", "source"))


def _rollup_series(window: Window, start: datetime, end: datetime) -> QuerySet:
    """(bucket start, failure type, runs) over the complete hours [start, end): six-hour buckets
    read one block each and leave out the tail (`_tail_rows`); others read the hourly rows."""
    if window.per_bucket == BLOCK_HOURS:
        blocks = whole_blocks(start, end)[0]
        qs = SixHourRollup.objects.filter(blocks).annotate(bucket=F("start"))
    else:
        qs = RunRollup.objects.filter(hour__gte=start, hour__lt=end).annotate(bucket=F("hour"))
    return qs.values_list("bucket", "failure_type").annotate(Sum("count")).order_by()


def _block_wasted(start: datetime, end: datetime) -> QuerySet:
    """Wasted retries per (failure type, source) over the whole six-hour blocks from `start`."""
    return (
        SixHourWastedRetries.objects.filter(whole_blocks(start, end)[0])
        .values_list("failure_type", "source")
        .annotate(n=Sum("retries"))
        .order_by()
    )


def all_time_counts(now: datetime | None = None) -> dict[tuple[str, str, str], dict[str, int]]:
    """Per (status, failure_type, source), ever: runs and every named set (METRICS), from the
    running totals on PostgreSQL; elsewhere summed from the rollups plus the live hour."""
    counts: dict[tuple[str, str, str], dict[str, int]] = defaultdict(
        lambda: dict.fromkeys(METRICS, 0)
    )
    if counters.enabled():
        # Running totals and the deltas not folded yet: a few hundred rows, however many runs.
        for row in [*_sums(RunTotal.objects.all(), KEYS), *_sums(RunDelta.objects.all(), KEYS)]:
            totals = counts[(row["status"], row["failure_type"], row["source"])]
            for m in METRICS:
                totals[m] += row[m] or 0
        return counts
    anchor = floor_hour(now or timezone.now())
    summed = (
        RunRollup.objects.filter(hour__lt=anchor)
        .values("status", "failure_type", "source")
        .annotate(**{m: Sum(m) for m in METRICS})
        .order_by()
    )
    live = (
        {**g, "failure_type": g["failure_type"] or ""}
        for g in grouped_runs(anchor, anchor + HOUR, "hour")
    )
    for row in [*summed, *live]:
        totals = counts[(row["status"], row["failure_type"], row["source"])]
        for m in METRICS:
            totals[m] += row[m] or 0
    return counts
