"""The runs search's own table on PostgreSQL: trigram indexes kept off the ingest path.

Beat fills it a few seconds behind the writes, triggers cover updates and backdated inserts, and
the search never depends on the fill being up to date (see docs/run-indexes.md). SQLite
(development) has no such table: the search scans the runs.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

TABLE = "orchestrator_runsearch"
DEFAULT = f"{TABLE}_default"
STATE = "orchestrator_runsearchstate"
RUNS = "orchestrator_run"
# What Django's icontains compares, computed once here instead of at every search.
TEXT = "upper(r.attempted::text), upper(r.detail)"
# Earlier than any run, and a timestamp Python can read (unlike '-infinity').
BEGINNING = "1900-01-01 00:00:00+00"
TRIGRAM_INDEXES = {
    "runsearch_attempted_trgm": "attempted",
    "runsearch_detail_trgm": "detail",
}

_TABLES = f"""
CREATE TABLE {TABLE} (
    run_id bigint NOT NULL,
    created_at timestamptz NOT NULL,
    attempted text NOT NULL,
    detail text NOT NULL
) PARTITION BY RANGE (created_at);
CREATE TABLE {DEFAULT} PARTITION OF {TABLE} DEFAULT;
CREATE UNIQUE INDEX runsearch_run ON {TABLE} (run_id, created_at);
CREATE TABLE {STATE} (
    id integer PRIMARY KEY CHECK (id = 1),
    through timestamptz NOT NULL
);
INSERT INTO {STATE} VALUES (1, '{BEGINNING}');
"""

# The WHEN clause keeps every other UPDATE of a run free of it.
_FOLLOW = f"""
CREATE FUNCTION orchestrator_runsearch_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {TABLE} (run_id, created_at, attempted, detail)
        SELECT r.id, r.created_at, {TEXT} FROM (SELECT NEW.*) r
    ON CONFLICT (run_id, created_at)
        DO UPDATE SET attempted = EXCLUDED.attempted, detail = EXCLUDED.detail;
    RETURN NULL;
END $$;
CREATE TRIGGER runsearch_follow AFTER UPDATE ON {RUNS} FOR EACH ROW
    WHEN (OLD.detail IS DISTINCT FROM NEW.detail OR OLD.attempted IS DISTINCT FROM NEW.attempted
          OR OLD.created_at IS DISTINCT FROM NEW.created_at)
    EXECUTE FUNCTION orchestrator_runsearch_follow();
"""

# A run created before the fill's mark (an import) gets its entry at once: the fill never reads it.
_BACKDATED = f"""
CREATE FUNCTION orchestrator_runsearch_backdated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {TABLE} (run_id, created_at, attempted, detail)
        SELECT r.id, r.created_at, {TEXT} FROM new_runs r
        WHERE r.created_at <= (SELECT through FROM {STATE} WHERE id = 1)
    ON CONFLICT (run_id, created_at) DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER runsearch_backdated AFTER INSERT ON {RUNS}
    REFERENCING NEW TABLE AS new_runs FOR EACH STATEMENT
    EXECUTE FUNCTION orchestrator_runsearch_backdated();
"""

_DROP = f"""
DROP TRIGGER IF EXISTS runsearch_backdated ON {RUNS};
DROP FUNCTION IF EXISTS orchestrator_runsearch_backdated();
DROP TRIGGER IF EXISTS runsearch_follow ON {RUNS};
DROP FUNCTION IF EXISTS orchestrator_runsearch_follow();
DROP TABLE IF EXISTS {TABLE};
DROP TABLE IF EXISTS {STATE};
"""

# A database without the table keeps being asked, so a migration applied meanwhile is picked up.
_present: set[str] = set()


def _execute(sql: str, params: list | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def install(run_partitions: dict[str, tuple[datetime, datetime]]) -> None:
    """Create the table with a partition per run partition, its state row and its triggers, then
    fill it and build its trigram indexes."""
    with transaction.atomic():
        _execute(_TABLES)
        _execute(_FOLLOW)
        _execute(_BACKDATED)
        for name, (start, end) in run_partitions.items():
            create_partition(name, start, end)
        for name in [*run_partitions, f"{RUNS}_default"]:
            create_statistics(name)
    rebuild()


def uninstall() -> None:
    _execute(_DROP)


def in_use() -> bool:
    if connection.vendor != "postgresql":
        return False
    key = connection.settings_dict["NAME"]
    if key not in _present:
        with connection.cursor() as cursor:
            cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [STATE])
            if cursor.fetchone()[0]:
                _present.add(key)
    return key in _present


def partition_name(run_partition: str) -> str:
    return TABLE + run_partition.removeprefix(RUNS)


def create_partition(run_partition: str, start: datetime, end: datetime) -> None:
    """Create the entries' partition of [start, end), taking over the default partition's
    entries of that range."""
    quote = connection.ops.quote_name
    name = quote(partition_name(run_partition))
    with transaction.atomic():
        _execute(f"CREATE TABLE {name} (LIKE {TABLE} INCLUDING DEFAULTS)")
        _execute(
            f"WITH moved AS (DELETE FROM {DEFAULT} WHERE created_at >= %s AND created_at < %s "
            f"RETURNING *) INSERT INTO {name} SELECT * FROM moved",
            [start, end],
        )
        _execute(
            f"ALTER TABLE {TABLE} ATTACH PARTITION {name} FOR VALUES FROM (%s) TO (%s)",
            [start, end],
        )


def drop_partition(run_partition: str) -> None:
    _execute(f"DROP TABLE IF EXISTS {connection.ops.quote_name(partition_name(run_partition))}")


def delete_before(cutoff: datetime) -> None:
    _execute(f"DELETE FROM {DEFAULT} WHERE created_at < %s", [cutoff])


def watermark() -> datetime:
    """Return where the fill has read up to."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT through FROM {STATE} WHERE id = 1")
        return cursor.fetchone()[0]


def rewind(to: datetime) -> None:
    """Make the next fill read again from `to` (after an import of old runs)."""
    _execute(f"UPDATE {STATE} SET through = LEAST(through, %s) WHERE id = 1", [to])


def fill(limit: int = 100_000) -> int:
    """Add the entries of the runs created since the last fill (less the overlap), at most about
    `limit` runs; return how many were added."""
    return _fill_slice(limit)[0]


def catch_up(seconds: float = 20.0, limit: int = 100_000) -> int:
    deadline = time.monotonic() + seconds
    added, done = _fill_slice(limit)
    while not done and time.monotonic() < deadline:
        more, done = _fill_slice(limit)
        added += more
    return added


# The mark never passes the start of the oldest transaction still writing: its runs commit later.
_SAFE_UNTIL = """LEAST(clock_timestamp(), (
    SELECT min(xact_start) FROM pg_stat_activity
    WHERE datname = current_database() AND backend_xid IS NOT NULL AND pid <> pg_backend_pid()
))"""


def _fill_slice(limit: int) -> tuple[int, bool]:
    """Return (entries added, whether it read up to the present)."""
    overlap = f"{settings.RUN_SEARCH_OVERLAP_SECONDS} seconds"
    with transaction.atomic(), connection.cursor() as cursor:
        # The row lock keeps two fills from reading the same slice at once.
        cursor.execute(
            f"SELECT through, through - %s::interval, {_SAFE_UNTIL} FROM {STATE} "
            "WHERE id = 1 FOR UPDATE",
            [overlap],
        )
        mark, low, now = cursor.fetchone()
        # Runs sharing the limit-th run's creation time all go in, so each slice moves the mark.
        cursor.execute(
            f"SELECT created_at FROM {RUNS} WHERE created_at > %s AND created_at <= %s "
            "ORDER BY created_at OFFSET %s LIMIT 1",
            [mark, now, limit],
        )
        found = cursor.fetchone()
        high = found[0] if found else now
        cursor.execute(
            f"INSERT INTO {TABLE} (run_id, created_at, attempted, detail) "
            f"SELECT r.id, r.created_at, {TEXT} FROM {RUNS} r "
            "WHERE r.created_at > %s AND r.created_at <= %s "
            "ON CONFLICT (run_id, created_at) DO NOTHING",
            [low, high],
        )
        added = cursor.rowcount
        cursor.execute(f"UPDATE {STATE} SET through = GREATEST(through, %s) WHERE id = 1", [high])
    return added, found is None


def rebuild() -> int:
    """Empty the table and fill it from every run, building the trigram indexes after the rows."""
    with transaction.atomic(), connection.cursor() as cursor:
        for name in TRIGRAM_INDEXES:
            cursor.execute(f"DROP INDEX IF EXISTS {name}")
        cursor.execute(f"TRUNCATE {TABLE}")
        # Set before the snapshot: a run committed after it is re-read by the next fill.
        cursor.execute(f"UPDATE {STATE} SET through = clock_timestamp() WHERE id = 1")
        cursor.execute(
            f"INSERT INTO {TABLE} (run_id, created_at, attempted, detail) "
            f"SELECT r.id, r.created_at, {TEXT} FROM {RUNS} r "
            f"WHERE r.created_at <= (SELECT through FROM {STATE} WHERE id = 1)"
        )
        added = cursor.rowcount
        cursor.execute("SET LOCAL maintenance_work_mem = '256MB'")
        for name, column in TRIGRAM_INDEXES.items():
            cursor.execute(f"CREATE INDEX {name} ON {TABLE} USING gin ({column} gin_trgm_ops)")
        cursor.execute(f"ANALYZE {TABLE}")
        cursor.execute(f"ANALYZE {RUNS}")
    return added


def _pattern(text: str) -> str:
    return f"%{connection.ops.prep_for_like_query(text)}%"


def _window(alias: str, since: datetime | None, until: datetime | None) -> tuple[str, list]:
    sql, params = "", []
    if since is not None:
        sql, params = f" AND {alias}.created_at >= %s", [since]
    if until is not None:
        sql, params = f"{sql} AND {alias}.created_at < %s", [*params, until]
    return sql, params


def estimated_matches(text: str, since: datetime | None, until: datetime | None) -> float:
    """Return the planner's estimate of how many entries of the window contain `text`."""
    window, params = _window("s", since, until)
    with connection.cursor() as cursor:
        cursor.execute(
            f"EXPLAIN (FORMAT JSON) SELECT 1 FROM {TABLE} s "
            f"WHERE (s.attempted LIKE UPPER(%s) OR s.detail LIKE UPPER(%s)){window}",
            [_pattern(text), _pattern(text), *params],
        )
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return plan[0]["Plan"]["Plan Rows"]


def walks(text: str, since: datetime | None, until: datetime | None) -> bool:
    """Return whether a search is better served by walking the runs newest first (a common text)
    than by starting from the trigram matches (a rare one)."""
    return estimated_matches(text, since, until) > settings.RUN_SEARCH_WALK_ABOVE


def matching_runs(text: str, since: datetime | None = None, until: datetime | None = None):
    """Return a condition on a run query that lets PostgreSQL start from this table's trigram
    indexes: the run is among its matches, or newer than the fill is sure to have read. It
    narrows, never decides: the caller keeps the exact test on the run's own columns."""
    window, params = _window("s", since, until)
    pattern = _pattern(text)
    # A value, not a subquery: for a subquery the planner guesses a third of the table.
    tail = watermark() - timedelta(seconds=settings.RUN_SEARCH_OVERLAP_SECONDS)
    # The runs the fill has not read yet (about a minute of them) are tested on their own
    # columns right there: handed up whole, each was looked up again by id and tested then (a
    # minute of 100,000 runs an hour: 1,600 probes, 5 ms, once per search section).
    return RawSQL(
        f'("{RUNS}"."id", "{RUNS}"."created_at") IN ('
        f"SELECT s.run_id, s.created_at FROM {TABLE} s "
        f"WHERE (s.attempted LIKE UPPER(%s) OR s.detail LIKE UPPER(%s)){window} "
        f"UNION ALL SELECT t.id, t.created_at FROM {RUNS} t WHERE t.created_at > %s "
        f"AND (UPPER(t.detail) LIKE UPPER(%s) OR UPPER(t.attempted::text) LIKE UPPER(%s)))",
        [pattern, pattern, *params, tail, pattern, pattern],
        output_field=BooleanField(),
    )


# Per run partition: without them the planner guesses a substring is rare and never walks.
STATISTICS = {"detail_upper": "upper(detail)", "attempted_upper": "upper(attempted::text)"}


def create_statistics(run_partition: str) -> None:
    quote = connection.ops.quote_name
    for suffix, expression in STATISTICS.items():
        _execute(
            f"CREATE STATISTICS IF NOT EXISTS {quote(f'{run_partition}_{suffix}')} "
            f"ON ({expression}) FROM {quote(run_partition)}"
        )
