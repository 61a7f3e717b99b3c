"""The run table's partitions on PostgreSQL: a week each, created ahead, dropped by retention.

A week rather than a day because every query not bounded by `created_at` plans and locks every
partition (docs/benchmarks.md). A default partition catches any run no partition covers, and
bounds are read from the catalog, so partitions of another span keep working beside new ones.
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
# A Monday, so weekly partitions run Monday to Sunday.
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
    return f"{PREFIX}{day:%Y%m%d}"


def period_of(day: date) -> tuple[date, date]:
    """Return the first day of the period holding `day` and the day after the period."""
    span = settings.RUN_PARTITION_DAYS
    first = day - timedelta(days=(day - EPOCH).days % span)
    return first, first + timedelta(days=span)


def _midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def ranges() -> dict[str, tuple[datetime, datetime]]:
    """Return {partition name: (start, end)} of the range partitions that exist."""
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
        # Deleting from the partition fires no trigger of the parent: the runs keep their claims.
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
    names created."""
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
    """Drop the runs created before `cutoff` (whole partitions on PostgreSQL); return what went."""
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
                Run.objects.filter(pk__in=ids).delete()
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
