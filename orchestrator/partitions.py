"""The run table's partitions on PostgreSQL: a week each, created ahead, dropped by retention.

`orchestrator_run` is partitioned by range of `created_at` (see `Run`). A partition spans
RUN_PARTITION_DAYS days (7 by default, periods counted from Monday 1970-01-05, UTC) and is named
after its first day, `orchestrator_run_pYYYYMMDD`; `orchestrator_run_default` holds any run no
partition covers (a clock far off, a test travelling in time), so an insert never fails for want of
a partition. Beat calls `ensure_ahead` every hour: the coming days are covered before their first
run. A partition created while the default partition holds runs of its range takes them over
(moved in the same transaction, then attached), so the default stays small.

Why a week and not a day: every query not bounded by `created_at` (a run by id, a workflow's runs,
the review queue's joins) plans and locks every partition with all of its indexes, so at 40 daily
partitions a lookup by id took ~680 locks and 7.5 ms, most of it planning. The bounds of each
partition are read from the catalog, never assumed from the setting, so partitions of another
span (days, from before the setting changed) keep working beside new ones: a period partly
covered gets partitions for its uncovered gaps only.

`drop_before` is the runs' retention: whole partitions older than the cutoff are dropped (their
claims in `RunKey` deleted by range, the review items of their runs deleted, and references from
newer runs set to NULL first, as the ORM's CASCADE / SET NULL would), and old runs that sat in the
default partition are deleted. A run is thus kept up to one partition span past
RUNS_RETENTION_DAYS. On SQLite (development, unpartitioned) it deletes the old runs through the
ORM. Nothing here runs on the request path.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models.expressions import RawSQL

from orchestrator import counters, search
from orchestrator.models import ReviewItem, Run

PARENT = "orchestrator_run"
DEFAULT = f"{PARENT}_default"
PREFIX = f"{PARENT}_p"
# Periods are counted from a Monday, so weekly partitions run Monday to Sunday.
EPOCH = date(1970, 1, 5)
_BOUND = re.compile(r"FROM \('([^']+)'\) TO \('([^']+)'\)")


def is_partitioned() -> bool:
    """Return True if the run table is partitioned (PostgreSQL, migrated)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(%s)", [PARENT]
        )
        return cursor.fetchone() is not None


def name_of(day: date) -> str:
    """The name of the partition that starts on `day`."""
    return f"{PREFIX}{day:%Y%m%d}"


def period_of(day: date) -> tuple[date, date]:
    """The period of RUN_PARTITION_DAYS days holding `day`: its first day and the day after it."""
    span = settings.RUN_PARTITION_DAYS
    first = day - timedelta(days=(day - EPOCH).days % span)
    return first, first + timedelta(days=span)


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def ranges() -> dict[str, tuple[datetime, datetime]]:
    """Return {partition name: (start, end)} of the range partitions that exist, from the
    catalog (the default partition has no range and is left out)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s)",
            [PARENT],
        )
        rows = cursor.fetchall()
    found = {}
    for name, bound in rows:
        if match := _BOUND.search(bound or ""):
            start, end = (datetime.fromisoformat(value) for value in match.groups())
            found[name] = (start.astimezone(UTC), end.astimezone(UTC))
    return found


def _gaps(
    start: datetime, end: datetime, taken: list[tuple[datetime, datetime]]
) -> Iterator[tuple[datetime, datetime]]:
    """The parts of [start, end) that no range of `taken` covers, in order."""
    cursor = start
    for lo, hi in sorted(taken):
        if hi <= cursor or lo >= end:
            continue
        if lo > cursor:
            yield cursor, lo
        cursor = max(cursor, hi)
    if cursor < end:
        yield cursor, end


def create(start: datetime, end: datetime) -> str:
    """Create the partition of [start, end), taking over the default partition's runs of it."""
    name = name_of(start.astimezone(UTC).date())
    quote = connection.ops.quote_name
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE {quote(name)} "
            f"(LIKE {quote(PARENT)} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
        )
        # Deleting from the partition itself fires none of the parent's triggers: the moved
        # runs keep their claims in RunKey (same id, same created_at).
        cursor.execute(
            f"WITH moved AS (DELETE FROM {quote(DEFAULT)} "
            "WHERE created_at >= %s AND created_at < %s RETURNING *) "
            f"INSERT INTO {quote(name)} SELECT * FROM moved",
            [start, end],
        )
        cursor.execute(
            f"ALTER TABLE {quote(PARENT)} ATTACH PARTITION {quote(name)} "
            "FOR VALUES FROM (%s) TO (%s)",
            [start, end],
        )
        if search.in_use():
            search.create_partition(name, start, end)
            search.create_statistics(name)
    return name


def cover(first: date, last: date) -> list[str]:
    """Create what is missing of the periods holding the days `first` to `last`; return the
    names created (none if it was all covered, or the table is not partitioned)."""
    if not is_partitioned():
        return []
    taken = list(ranges().values())
    created = []
    period = period_of(first)
    while period[0] <= last:
        for start, end in _gaps(_midnight(period[0]), _midnight(period[1]), taken):
            created.append(create(start, end))
            taken.append((start, end))
        period = period_of(period[1])
    return created


def ensure_ahead(ahead: int, today: date | None = None) -> list[str]:
    """Cover today and the next `ahead` days with partitions; return those created."""
    today = today or datetime.now(UTC).date()
    return cover(today, today + timedelta(days=ahead))


def _forget(ids: str, params: list) -> None:
    """Do what the ORM's CASCADE and SET NULL would for the runs whose ids `ids` selects."""
    table = connection.ops.quote_name(PARENT)
    ReviewItem.objects.filter(run_id__in=RawSQL(ids, params)).delete()
    with connection.cursor() as cursor:
        for column in ("retry_of_id", "switched_from_id"):
            cursor.execute(f"UPDATE {table} SET {column} = NULL WHERE {column} IN ({ids})", params)


def drop_before(cutoff: datetime) -> list[str]:
    """Drop the runs created before `cutoff` (whole partitions on PostgreSQL); return what went.

    A partition goes once all of its range is before the cutoff; runs before the cutoff in the
    default partition (or anywhere, unpartitioned) are deleted row by row."""
    if not is_partitioned():
        _delete_rows(cutoff)
        return []
    quote = connection.ops.quote_name
    dropped = []
    for name, (start, end) in sorted(ranges().items(), key=lambda item: item[1]):
        if end > cutoff:
            continue
        with transaction.atomic(), connection.cursor() as cursor:
            _forget(f"SELECT id FROM {quote(name)}", [])
            cursor.execute(
                "DELETE FROM orchestrator_runkey WHERE created_at >= %s AND created_at < %s",
                [start, end],
            )
            cursor.execute(f"DROP TABLE {quote(name)}")
            if search.in_use():
                search.drop_partition(name)
        dropped.append(name)
    _delete_rows(cutoff, table=DEFAULT)
    if search.in_use():
        search.delete_before(cutoff)
    return dropped


def _delete_rows(cutoff: datetime, table: str = PARENT, chunk: int = 10_000) -> int:
    """Delete the runs created before `cutoff` from `table`, a chunk at a time."""
    quote = connection.ops.quote_name
    deleted = 0
    while True:
        with transaction.atomic():
            if connection.vendor != "postgresql":
                ids = list(
                    Run.objects.filter(created_at__lt=cutoff).values_list("pk", flat=True)[:chunk]
                )
                if not ids:
                    return deleted
                Run.objects.filter(pk__in=ids).delete()  # the ORM's CASCADE and SET NULL
                deleted += len(ids)
                continue
            select = f"SELECT id FROM {quote(table)} WHERE created_at < %s LIMIT {chunk}"
            with connection.cursor() as cursor:
                cursor.execute(select, [cutoff])
                ids = [row[0] for row in cursor.fetchall()]
                if not ids:
                    return deleted
                _forget("SELECT unnest(%s::bigint[])", [ids])
                # Through the parent: its statement trigger releases the runs' claims.
                with counters.deleting_for_retention(cursor):
                    cursor.execute(
                        f"DELETE FROM {quote(PARENT)} WHERE id = ANY(%s) AND created_at < %s",
                        [ids, cutoff],
                    )
                deleted += len(ids)
