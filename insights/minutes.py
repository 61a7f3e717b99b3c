"""Minute rollups and running totals, kept from the runs as they are written (PostgreSQL): the run
table's statement triggers append each statement's change per minute and key (`RunDelta`), `fold`
moves them into `MinuteRollup` and `RunTotal`, and readers add the deltas not folded yet, so a
count agrees with a live count whenever it is read."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import connection, transaction
from django.db.models import Max
from django.db.models.expressions import RawSQL
from django.utils import timezone

from insights.models import MinuteRollup, RollupVersion, RunDelta, RunTotal
from insights.stats import METRICS, metric_aggregates
from orchestrator import counters

# Kept after folding: the 1-hour window, the one before it (and the current hour), a margin.
KEEP = timedelta(hours=3)
KEYS = ("status", "failure_type", "source")
# The minute a run was created in, in UTC whatever the writer's session time zone.
MINUTE = RawSQL("date_trunc('minute', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'", [])


def trigger() -> counters.DeltaTrigger:
    return counters.DeltaTrigger(
        name="dashboard_minute_counts",  # the name installed databases know it by
        table=RunDelta._meta.db_table,
        keys=("minute", *KEYS),
        sums=metric_aggregates(),
        expressions={"minute": MINUTE},
        blank=("failure_type",),
    )


def install() -> None:
    """Create the triggers and count the totals and the kept minutes from the run table."""
    if not counters.enabled():
        return
    t = trigger()
    columns = ", ".join(METRICS)
    blank_keys = "status, coalesce(failure_type, ''), source"
    since = connection.ops.compose_sql("created_at >= %s", [timezone.now() - KEEP])
    recent = f"(SELECT * FROM {counters.RUN_TABLE} WHERE {since})"
    totals = counters.grouped_sql(KEYS, metric_aggregates(), {}, "r", counters.RUN_TABLE)
    with transaction.atomic():
        counters.execute(
            [
                f"LOCK TABLE {counters.RUN_TABLE} IN SHARE MODE",
                *t.install_sql(),
                f"TRUNCATE {RunDelta._meta.db_table}, {MinuteRollup._meta.db_table}, "
                f"{RunTotal._meta.db_table}",
                f"INSERT INTO {RunTotal._meta.db_table} ({', '.join(KEYS)}, {columns}) "
                f"SELECT {blank_keys}, {columns} FROM ({totals}) d",
                f"INSERT INTO {MinuteRollup._meta.db_table} (minute, {', '.join(KEYS)}, {columns}) "
                f"SELECT minute, {blank_keys}, {columns} FROM ({t.grouped('r', recent)}) d",
            ]
        )
        RollupVersion.bump()


def uninstall() -> None:
    if counters.enabled():
        counters.execute(trigger().drop_sql())


def _upsert(table: str, keys: tuple[str, ...], constraint: str, where: str = "true") -> str:
    key_list = ", ".join(keys)
    sums = ", ".join(f"sum({m})" for m in METRICS)
    updates = ", ".join(f"{m} = t.{m} + EXCLUDED.{m}" for m in METRICS)
    return (
        f"INSERT INTO {table} AS t ({key_list}, {', '.join(METRICS)}) "
        f"SELECT {key_list}, {sums} FROM moved WHERE {where} GROUP BY {key_list} "
        f"ORDER BY {key_list} ON CONFLICT ON CONSTRAINT {constraint} DO UPDATE SET {updates}"
    )


def fold(now: datetime | None = None) -> int:
    """Move the pending deltas into the minute rollups and running totals, drop minutes older than
    KEEP, bump the rollup version; return the rows folded (0: another fold runs, or SQLite)."""
    if not counters.enabled():
        return 0
    keep = (now or timezone.now()) - KEEP
    columns = ", ".join(("minute", *KEYS, *METRICS))
    with transaction.atomic(), connection.cursor() as cursor:
        if not counters.fold_lock(cursor, RunDelta._meta.db_table):
            return 0
        minutes = _upsert(
            MinuteRollup._meta.db_table, ("minute", *KEYS), "minute_rollup_key", "minute >= %s"
        )
        totals = _upsert(RunTotal._meta.db_table, KEYS, "run_total_key")
        cursor.execute(
            f"WITH moved AS (DELETE FROM {RunDelta._meta.db_table} RETURNING {columns}), "
            f"minutes AS ({minutes}), totals AS ({totals}) SELECT count(*) FROM moved",
            [keep],
        )
        folded = cursor.fetchone()[0]
        MinuteRollup.objects.filter(minute__lt=keep).delete()
        if folded:
            RollupVersion.bump()
    return folded


def version() -> tuple[int, int] | None:
    """What the counts read now depend on: (the last fold, the newest pending delta). None on
    SQLite, whose counts are live (nothing to key a cache by)."""
    if not counters.enabled():
        return None
    folded = RollupVersion.current()
    pending = RunDelta.objects.aggregate(m=Max("id"))["m"] or 0
    return folded, pending
