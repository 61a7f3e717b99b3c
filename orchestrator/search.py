"""The runs search's own table on PostgreSQL: substring indexes kept off the ingest path.

The runs search (the runs page's box and `GET /api/v1/runs?q=`) finds runs whose error detail or
attempted call contains a text, case-insensitively, anywhere in a word: operators paste log
fragments, host names and parts of identifiers into it. Trigram GIN indexes serve such a search,
but on the run table they were a third of what each inserted run cost (README "The run store",
docs/run-indexes.md), so they live here instead:

- `orchestrator_runsearch` holds, per run, the upper-cased text of its attempted call and of
  its detail, with a trigram GIN index on each. It is partitioned like the run table (the same
  bounds, a partition named after the run partition it mirrors) and is dropped with it by
  retention.
- Beat fills it a few seconds behind the writes (`fill`, RUN_SEARCH_FILL_SECONDS): one
  `INSERT … SELECT` per call over the runs created since the last call (the *mark*), in bulk,
  off the request path. The mark never passes the start of a transaction still writing to the
  database, and each call re-reads RUN_SEARCH_OVERLAP_SECONDS before it, so a run committed
  after a fill passed its `created_at` (read as the report arrived, just before its transaction)
  is read by a later one; runs already there are skipped.
- Two triggers cover what the fill cannot see: an UPDATE that changes a run's detail or
  attempted call rewrites its entry (a coordinated run gets its detail when it finishes), and an
  INSERT of a run created before the mark (an import, a clock read long before the insert)
  writes its entry at once.
- The search never depends on the fill being up to date (`matching_runs`): a run matches when
  its own columns contain the text (the exact test, as on SQLite) and it is either in this
  table's matches or newer than where the fill is sure to have read (the mark less the
  overlap). The planner either walks the runs newest first and checks each candidate's entry,
  or starts from this table's trigram matches; the newest seconds are read from the run table.
  With the fill stopped, searches stay correct and get slower as the unfilled tail grows.

SQLite (development) has no such table: the search scans the runs.
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
# The text each entry holds, from a run row aliased `r`: what Django's icontains compares
# (UPPER(column::text)), computed once here instead of at every search.
TEXT = "upper(r.attempted::text), upper(r.detail)"
# The mark before any fill: earlier than any run (a timestamp Python can read, unlike
# '-infinity').
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

# An UPDATE that changes a run's detail or attempted call writes its entry (or corrects the one
# there); the WHEN clause keeps every other UPDATE free of it.
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

# A run inserted with a creation time the fill has already passed (an import, a run written
# with an earlier clock reading) gets its entry at once: the fill would never read it. Such runs
# are rare; for the others this is a scan of the statement's new rows (the transition table the
# claims and count triggers already keep) that keeps none.
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

# Set per process once the table is known to exist (it never goes away without a migration,
# which restarts the processes); a database without it keeps being asked, so a migration applied
# while a process runs is picked up.
_present: set[str] = set()


def _execute(sql: str, params: list | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def install(run_partitions: dict[str, tuple[datetime, datetime]]) -> None:
    """Create the table (with a partition per run partition: {name: (start, end)}, as
    `partitions.ranges` reads them), its state row and its triggers, fill it from the runs there
    are, then build its trigram indexes (PostgreSQL)."""
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
    """Whether the runs search reads this table (PostgreSQL, migrated)."""
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
    """The entries' partition that mirrors run partition `run_partition`."""
    return TABLE + run_partition.removeprefix(RUNS)


def create_partition(run_partition: str, start: datetime, end: datetime) -> None:
    """Create the entries' partition of [start, end) beside its run partition, taking over the
    default partition's entries of that range (as the run partition takes over runs)."""
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
    """Drop the entries' partition that mirrors a dropped run partition."""
    _execute(f"DROP TABLE IF EXISTS {connection.ops.quote_name(partition_name(run_partition))}")


def delete_before(cutoff: datetime) -> None:
    """Delete the default partition's entries of runs created before `cutoff` (retention)."""
    _execute(f"DELETE FROM {DEFAULT} WHERE created_at < %s", [cutoff])


def watermark() -> datetime:
    """Where the fill has read up to: every run created at or before it was read (bar those
    committed later than RUN_SEARCH_OVERLAP_SECONDS after their creation)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT through FROM {STATE} WHERE id = 1")
        return cursor.fetchone()[0]


def rewind(to: datetime) -> None:
    """Make the next fill read again from `to`: after runs were written with creation times
    before the mark (an import of old runs, a benchmark's load). Runs already entered are
    skipped."""
    _execute(f"UPDATE {STATE} SET through = LEAST(through, %s) WHERE id = 1", [to])


def fill(limit: int = 100_000) -> int:
    """Add the entries of the runs created since the last fill (less the overlap); return how
    many were added. At most about `limit` runs are read in one call: a backlog (after an
    outage, or a migration) is taken a slice at a time, each slice its own transaction."""
    return _fill_slice(limit)[0]


def catch_up(seconds: float = 20.0, limit: int = 100_000) -> int:
    """Fill slice after slice until the table is caught up or `seconds` have passed."""
    deadline = time.monotonic() + seconds
    added, done = _fill_slice(limit)
    while not done and time.monotonic() < deadline:
        more, done = _fill_slice(limit)
        added += more
    return added


# How far a fill may move the mark: the clock (not the transaction's start: a fill that waited
# for the lock reads up to when it got it), held back to the start of the oldest transaction
# still writing to this database. A run that transaction inserts is committed later, and its
# creation time (read as the report arrived) is at most a little before that start: the next
# fills re-read from there, less the overlap.
_SAFE_UNTIL = """LEAST(clock_timestamp(), (
    SELECT min(xact_start) FROM pg_stat_activity
    WHERE datname = current_database() AND backend_xid IS NOT NULL AND pid <> pg_backend_pid()
))"""


def _fill_slice(limit: int) -> tuple[int, bool]:
    """One slice of the fill: (entries added, whether it read up to the present)."""
    overlap = f"{settings.RUN_SEARCH_OVERLAP_SECONDS} seconds"
    with transaction.atomic(), connection.cursor() as cursor:
        # The row lock keeps two fills (beat firing twice) from reading the same slice at once.
        cursor.execute(
            f"SELECT through, through - %s::interval, {_SAFE_UNTIL} FROM {STATE} "
            "WHERE id = 1 FOR UPDATE",
            [overlap],
        )
        mark, low, now = cursor.fetchone()
        # The slice ends at the creation time of the limit-th run after the mark, or now; runs
        # that share that creation time (a batch) all go in, so each slice moves the mark.
        cursor.execute(
            f"SELECT created_at FROM {RUNS} WHERE created_at > %s AND created_at <= %s "
            "ORDER BY created_at OFFSET %s LIMIT 1",
            [mark, now, limit],
        )
        found = cursor.fetchone()
        high = found[0] if found else now
        # Runs of the overlap that have their entry are skipped by the unique index's check
        # (one probe each, as an anti-join would cost every new run besides).
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
    """Empty the table and fill it from every run, building the trigram indexes after the rows
    (far cheaper than maintaining them row by row): the migration, and a benchmark's load."""
    with transaction.atomic(), connection.cursor() as cursor:
        for name in TRIGRAM_INDEXES:
            cursor.execute(f"DROP INDEX IF EXISTS {name}")
        cursor.execute(f"TRUNCATE {TABLE}")
        # The mark is set before the snapshot below: a run created before it but committed
        # after the snapshot is re-read by the next fill (the overlap).
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
        cursor.execute(f"ANALYZE {RUNS}")  # and each partition's search statistics
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
    """The planner's estimate of how many entries of the window contain `text` (the column
    statistics of this table: no rows are read)."""
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
    """Whether a search is better served by walking the runs newest first and testing each
    (a text many runs contain: the first page is found after a few hundred runs) than by
    starting from the trigram matches (a rare text: a few entries, each joined to its run).
    The runs' own statistics on the searched expressions (`create_statistics`) let the planner
    walk; the trigram indexes would have to gather every match before the first page."""
    return estimated_matches(text, since, until) > settings.RUN_SEARCH_WALK_ABOVE


def matching_runs(text: str, since: datetime | None = None, until: datetime | None = None):
    """A condition on a run query (table `orchestrator_run`) that lets PostgreSQL start from
    this table's trigram indexes for the search of `text`: the run is among this table's matches
    (within the window, if given), or newer than what the fill is sure to have read. It
    narrows, never decides: the caller keeps the exact test on the run's own columns, so an
    entry out of date could only hide a run (one committed more than the overlap after its
    creation, until it is updated), never add one."""
    window, params = _window("s", since, until)
    pattern = _pattern(text)
    # The tail's bound goes in as a value, not a subquery: the planner then estimates it from
    # the statistics (a few seconds of runs), where for a subquery's value it guesses a third
    # of the table and plans the whole search for millions of rows.
    tail = watermark() - timedelta(seconds=settings.RUN_SEARCH_OVERLAP_SECONDS)
    return RawSQL(
        f'("{RUNS}"."id", "{RUNS}"."created_at") IN ('
        f"SELECT s.run_id, s.created_at FROM {TABLE} s "
        f"WHERE (s.attempted LIKE UPPER(%s) OR s.detail LIKE UPPER(%s)){window} "
        f"UNION ALL SELECT t.id, t.created_at FROM {RUNS} t WHERE t.created_at > %s)",
        [pattern, pattern, *params, tail],
        output_field=BooleanField(),
    )


# Statistics on exactly the expressions the search tests (UPPER(column::text) LIKE), one set
# per run partition (PostgreSQL keeps a partition's statistics on the partition): without them
# the planner guesses a substring matches a fraction of a percent of the runs and never walks.
# They cost nothing per insert; ANALYZE (autovacuum) computes them.
STATISTICS = {"detail_upper": "upper(detail)", "attempted_upper": "upper(attempted::text)"}


def create_statistics(run_partition: str) -> None:
    """Create the search expressions' statistics on one run partition."""
    quote = connection.ops.quote_name
    for suffix, expression in STATISTICS.items():
        _execute(
            f"CREATE STATISTICS IF NOT EXISTS {quote(f'{run_partition}_{suffix}')} "
            f"ON ({expression}) FROM {quote(run_partition)}"
        )
