"""The run table's partitions on PostgreSQL: a day each, created ahead, dropped by retention.

`orchestrator_run` is partitioned by range of `created_at` (see `Run`): `orchestrator_run_pYYYYMMDD`
holds the runs created on that day (UTC), and `orchestrator_run_default` any run no day partition
covers (a clock far off, a test travelling in time), so an insert never fails for want of a
partition. Beat calls `ensure_ahead` every hour: the coming days' partitions exist before their
first run. A day created while the default partition holds runs of that day takes them over
(moved in the same transaction, then attached), so the default stays small.

`drop_before` is the runs' retention: whole days older than the cutoff are dropped (their claims
in `RunKey` deleted by range, the review items of their runs deleted, and references from newer
runs set to NULL first, as the ORM's CASCADE / SET NULL would), and old runs that sat in the
default partition are deleted. On SQLite (development, unpartitioned) it deletes the old runs
through the ORM. Nothing here runs on the request path.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from django.db import connection, transaction
from django.db.models.expressions import RawSQL

from orchestrator import counters
from orchestrator.models import ReviewItem, Run

PARENT = "orchestrator_run"
DEFAULT = f"{PARENT}_default"
PREFIX = f"{PARENT}_p"


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


def day_of(name: str) -> date | None:
    """The day a partition named by `name_of` holds, or None for another table (the default)."""
    if not name.startswith(PREFIX):
        return None
    try:
        return datetime.strptime(name[len(PREFIX) :], "%Y%m%d").date()
    except ValueError:
        return None


def _bounds(day: date) -> tuple[datetime, datetime]:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return start, start + timedelta(days=1)


def days() -> dict[date, str]:
    """Return {day: partition name} of the day partitions that exist."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = to_regclass(%s)",
            [PARENT],
        )
        names = [row[0] for row in cursor.fetchall()]
    return {day: name for name in names if (day := day_of(name)) is not None}


def create_day(day: date) -> str:
    """Create the partition of `day`, taking over the default partition's runs of that day."""
    name = name_of(day)
    start, end = _bounds(day)
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
    return name


def ensure_ahead(ahead: int, today: date | None = None) -> list[str]:
    """Create the partitions of today and the next `ahead` days that are missing; return them."""
    if not is_partitioned():
        return []
    today = today or datetime.now(UTC).date()
    existing = days()
    wanted = [today + timedelta(days=n) for n in range(ahead + 1)]
    return [create_day(day) for day in wanted if day not in existing]


def _forget(ids: str, params: list) -> None:
    """Do what the ORM's CASCADE and SET NULL would for the runs whose ids `ids` selects."""
    table = connection.ops.quote_name(PARENT)
    ReviewItem.objects.filter(run_id__in=RawSQL(ids, params)).delete()
    with connection.cursor() as cursor:
        for column in ("retry_of_id", "switched_from_id"):
            cursor.execute(f"UPDATE {table} SET {column} = NULL WHERE {column} IN ({ids})", params)


def drop_before(cutoff: datetime) -> list[str]:
    """Drop the runs created before `cutoff` (whole days on PostgreSQL); return what went.

    A day partition goes once all of its day is before the cutoff; runs before the cutoff in
    the default partition (or anywhere, unpartitioned) are deleted row by row."""
    if not is_partitioned():
        _delete_rows(cutoff)
        return []
    quote = connection.ops.quote_name
    dropped = []
    for day, name in sorted(days().items()):
        start, end = _bounds(day)
        if end > cutoff:
            continue
        with transaction.atomic(), connection.cursor() as cursor:
            _forget(f"SELECT id FROM {quote(name)}", [])
            cursor.execute(
                "DELETE FROM orchestrator_runkey WHERE created_at >= %s AND created_at < %s",
                [start, end],
            )
            cursor.execute(f"DROP TABLE {quote(name)}")
        dropped.append(name)
    _delete_rows(cutoff, table=DEFAULT)
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
