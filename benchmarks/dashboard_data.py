"""The data of the dashboard and analytics benchmarks, and the database it goes into (created,
Django set up on it, dropped): 30 days of a realistic mix of runs, written with COPY with the run
table's secondary indexes set aside and its triggers off, the counts and search entries its
migrations would have made, review items on the latest escalations, and the rollups and failure
groups that beat folds."""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
METRICS_TOKEN = "benchmark-metrics-token"
DAYS = 30
SOURCES = ["web_search", "news_api", "scholar_api", "internal_db", "archive_api", "wiki_api"]
TOPICS = ["film", "music", "games", "publishing", "advertising", "education"]
FAILURES = {
    "transient": 20,
    "rate_limited": 20,
    "timeout": 20,
    "server_fault": 15,
    "resource_missing": 8,
    "auth_failure": 7,
    "invalid_input": 5,
    "unclassified": 5,
}
DECISIONS = {"retry": 50, "switch_source": 25, "accept_partial": 10, "escalate": 10, "abort": 5}


def ensure_database(url: str) -> None:
    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def setup_django(url: str) -> None:
    os.environ["DATABASE_URL"] = url
    # Production-like: DEBUG off (no debug toolbar-ish overhead), a throwaway secret.
    os.environ.setdefault("DEBUG", "0")
    os.environ.setdefault("SECRET_KEY", "benchmark-only-" + "x" * 40)
    os.environ["METRICS_TOKEN"] = METRICS_TOKEN
    os.environ.setdefault("API_RATE_LIMIT_PER_MINUTE", "0")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


# ---------------------------------------------------------------------------------------------
# Timing


def drop_database(url: str) -> None:
    from django.db import connections

    connections.close_all()
    parts = urlsplit(url)
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(parts.path.lstrip("/"))
            )
        )
    print(f"dropped the database {parts.path.lstrip('/')}")


def database_options(parser: argparse.ArgumentParser, default_url: str) -> None:
    """--database-url (PostgreSQL: the loads use COPY), --skip-load and --keep-database."""
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", default_url))
    parser.add_argument("--skip-load", action="store_true", help="Reuse the loaded data")
    parser.add_argument("--keep-database", action="store_true", help="Do not drop it at the end")


def postgres_url(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    if not args.database_url.startswith(("postgres://", "postgresql://")):
        parser.error(f"{parser.prog} needs PostgreSQL (COPY)")
    return args.database_url


@contextmanager
def benchmark_database(url: str, keep: bool) -> Iterator[None]:
    """The benchmark's database created if missing, Django set up on it and migrated; dropped
    at the end unless `keep` (a million runs is a gigabyte: not left behind by default)."""
    print(f"load average before starting: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    ensure_database(url)
    setup_django(url)
    from django.core.management import call_command

    try:
        started = time.perf_counter()
        call_command("migrate", interactive=False, verbosity=0)
        print(f"migrate: {time.perf_counter() - started:.1f} s")
        yield
    finally:
        if not keep:
            drop_database(url)


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds of `repeat` calls after one warm-up."""
    fn()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def _pick(rng: random.Random, weights: dict[str, int]) -> str:
    keys, cumulative = _cumulative(tuple(weights.items()))
    return rng.choices(keys, cum_weights=cumulative)[0]


@functools.cache
def _cumulative(weights: tuple[tuple[str, int], ...]) -> tuple[list[str], list[int]]:
    return [k for k, _ in weights], list(itertools.accumulate(w for _, w in weights))


def copy_rows(model, rows, triggers: bool = False) -> int:
    """COPY dicts into the model's table; a column a row leaves out gets the model's default.

    Without `triggers`, the table's triggers and foreign key checks are off (the generated rows
    are consistent)."""
    from django.db import connection

    fields = list(model._meta.concrete_fields)
    defaults = {f.column: f.get_db_prep_save(f.get_default(), connection) for f in fields}
    columns = [f.column for f in fields]
    stmt = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(model._meta.db_table), sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    n = 0
    with connection.cursor() as cursor:
        role = "origin" if triggers else "replica"
        cursor.execute(f"SET session_replication_role = {role}")
        with cursor.connection.cursor().copy(stmt) as copy:
            for row in rows:
                copy.write_row([row[c] if c in row else defaults[c] for c in columns])
                n += 1
        cursor.execute("RESET session_replication_role")
    return n


def workflow_rows(count: int, now: datetime):
    rng = random.Random(7)
    for i in range(1, count + 1):
        created = now - timedelta(days=DAYS) * (1 - i / count)
        status = rng.choices(["succeeded", "degraded", "failed", "running"], [70, 20, 5, 5])[0]
        yield {
            "id": i,
            "name": f"research #{i}",
            "goal": "AI impact on creative industries",
            "input": "{}",
            "status": status,
            "created_at": created,
            "updated_at": created,
            "coverage": "{}",
            "coverage_summary": "",
            "topics": json.dumps(TOPICS[:3]),
        }


@dataclass
class Tasks:
    """Attempts so far per first attempt (retries point at the first attempt of their task, and
    (retry_of, attempt) is unique), kept across the two COPYs of one load."""

    rng: random.Random = field(default_factory=lambda: random.Random(42))
    attempts: dict[int, int] = field(default_factory=dict)
    retries: set[int] = field(default_factory=set)


def run_rows(ids: range, total: int, workflows: int, span: tuple[datetime, datetime], tasks: Tasks):
    """The runs `ids` (of `total`) created evenly over `span`."""
    rng, (first, last) = tasks.rng, span
    now = datetime.now(UTC)
    for n, i in enumerate(ids, start=1):
        created = first + (last - first) * (n / (len(ids) + 1))
        row = _run(rng, i, created, now)
        if i > 200 and rng.random() < 0.15:
            root = _root(rng, i, tasks.retries)
            tasks.retries.add(i)
            tasks.attempts[root] = tasks.attempts.get(root, 1) + 1
            early = rng.random() < 0.005  # a few retries jump the provider's Retry-After
            row.update(retry_of_id=root, attempt=tasks.attempts[root], due_at=created)
            if row["started_at"]:
                row["started_at"] = created + timedelta(seconds=-1 if early else 0.2)
        row["workflow_id"] = min(workflows, 1 + i * workflows // total)
        yield row


def _root(rng: random.Random, i: int, retries: set[int]) -> int:
    """A recent first attempt (retries point at the first attempt of their task)."""
    while True:
        candidate = i - rng.randint(1, 200)
        if candidate not in retries:
            return candidate


def _run(rng: random.Random, i: int, created: datetime, now: datetime) -> dict:
    topic = rng.choice(TOPICS)
    row = {
        "id": i,
        "agent": f"agent-{i % 12}",
        "source": rng.choice(SOURCES),
        "topic": topic,
        "operation": "search",
        # JSON written by hand: json.dumps was a third of the generator's time at 10M rows
        "attempted": f'{{"operation": "search", "query": "AI impact on {topic} {i}"}}',
        "attempt": 1,
        "created_at": created,
        "started_at": created,
        "finished_at": created + timedelta(seconds=1.2),
        "duration_ms": 1200.0,
        # What the call cost (USD), for the Costs page: 0.001 to 0.009.
        "cost": f"0.00{i % 9 + 1}",
    }
    roll = rng.random()
    if roll < 0.68:
        results = 0 if rng.random() < 0.12 else rng.randint(1, 5)
        row.update(status="succeeded", result_count=results)
        urls = ", ".join(f'{{"url": "https://e.org/{i}/{j}"}}' for j in range(results))
        row["results"] = f"[{urls}]"
    elif roll < 0.97 or created < now - timedelta(hours=1):
        row.update(_failure(rng, i, escalated=roll < 0.70, source=row["source"]))
    else:
        row.update(status="queued", started_at=None, finished_at=None, due_at=now + timedelta(60))
    return row


@functools.cache
def _signature(source: str, ftype: str, code: int) -> str:
    """The signature of `_failure`'s detail (its run number is normalised away)."""
    from orchestrator.fingerprint import signature

    return signature(source, ftype, f"{ftype}: upstream said no (code {code}x, run 1)")


PARTIALS = [json.dumps([{"excerpt": f"part {j}"} for j in range(n)]) for n in range(4)]


def _failure(rng: random.Random, i: int, escalated: bool, source: str) -> dict:
    ftype = _pick(rng, FAILURES)
    partial = rng.randint(1, 3) if rng.random() < 0.3 else 0
    decision = "escalate" if escalated else _pick(rng, DECISIONS)
    # A few distinct errors per type and source, numbers varying: the groups' real shape.
    code = rng.randint(1, 4)
    detail = f"{ftype}: upstream said no (code {code}x, run {i})"
    return {
        "status": "escalated" if escalated else "failed",
        "failure_type": ftype,
        "signature": _signature(source, ftype, code),
        "retryable": ftype not in ("auth_failure", "invalid_input", "resource_missing"),
        "detail": detail,
        "partial_count": partial,
        "partial_results": PARTIALS[partial],
        "decision": decision,
        "decision_reason": f"{ftype} → {decision}",
        "policy_version": 1,
    }


TASKS = Tasks()


def load(rows: int, reviews: int, current: int) -> None:
    """COPY all but the current hour's `current` runs (`add_current_hour` writes those just
    before the pages are timed, so that they are in the current hour then)."""
    from django.db import connection

    from insights import minutes
    from orchestrator import counters, search
    from orchestrator.models import Run, Workflow

    now = datetime.now(UTC)
    workflows = max(10, rows // 50)  # 50 runs per workflow: 6 topics, a few sources each, retries
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE orchestrator_reviewitem, orchestrator_run, orchestrator_runkey, "
            "orchestrator_workflow, "
            "dashboard_runrollup, dashboard_sixhourrollup, dashboard_sixhourwastedretries, "
            "dashboard_failuregrouphour, dashboard_failuregroup RESTART IDENTITY CASCADE"
        )
    run_partitions(now)
    indexes = set_indexes_aside()
    started = time.perf_counter()
    copy_rows(Workflow, workflow_rows(workflows, now))
    span = (now - timedelta(days=DAYS), now - timedelta(minutes=1))
    n = copy_rows(Run, run_rows(range(1, rows - current + 1), rows, workflows, span, TASKS))
    seconds = time.perf_counter() - started
    print(f"COPY {n:,} runs + {workflows:,} workflows: {seconds:.1f} s ({n / seconds:,.0f} rows/s)")
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '512MB'")
        for statement in indexes:
            cursor.execute(statement)
    indexed = time.perf_counter() - started
    started = time.perf_counter()
    minutes.install()  # the triggers' counts, recounted from the runs as their migration does
    counters.install_workflow_counters()
    print(
        f"  {len(indexes)} secondary indexes rebuilt in {indexed:.1f} s; minute rollups, running "
        f"totals and workflow counters recounted in {time.perf_counter() - started:.1f} s"
    )
    if search.in_use():
        started = time.perf_counter()
        entered = search.rebuild()
        print(
            f"  the search table filled with {entered:,} runs and indexed in "
            f"{time.perf_counter() - started:.1f} s"
        )
    print(
        f"  a signature at insert: {signature_cost():.1f} µs per failure, beside "
        f"{1e6 * seconds / n:.1f} µs per row of this load (making the row and its COPY)"
    )
    with connection.cursor() as cursor:
        for table in ("orchestrator_run", "orchestrator_workflow"):
            top = f"(SELECT max(id) FROM {table})"
            cursor.execute(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), {top})")
    open_reviews(reviews, now)
    with connection.cursor() as cursor:
        for table in ("orchestrator_run", "orchestrator_workflow", "orchestrator_reviewitem"):
            cursor.execute(f"ANALYZE {table}")


def add_current_hour(rows: int, current: int) -> None:
    """COPY `current` runs created since the start of the current hour, with the triggers on (as
    an agent's batches are written), then fold their deltas as beat does."""
    from insights import minutes
    from orchestrator import partitions, search
    from orchestrator.models import Run

    now = datetime.now(UTC)
    anchor = now.replace(minute=0, second=0, microsecond=0)
    start_id = (Run.objects.order_by("-id").values_list("id", flat=True).first() or 0) + 1
    ids = range(start_id, start_id + current)
    workflows = max(10, rows // 50)
    recall_tasks(start_id)
    started = time.perf_counter()
    copy_rows(Run, run_rows(ids, rows, workflows, (anchor, now), TASKS), triggers=True)
    seconds = time.perf_counter() - started
    started = time.perf_counter()
    folded = minutes.fold()
    fold_ms = 1000 * (time.perf_counter() - started)
    entered, fill_ms = 0, 0.0
    if search.in_use():
        # Written with creation times spread over the hour, as if they had come in during it:
        # the fill is told to read from the hour's start, then does what beat would.
        started = time.perf_counter()
        search.rewind(anchor)
        entered = search.catch_up(seconds=3600)
        fill_ms = 1000 * (time.perf_counter() - started)
    print(
        f"current hour: COPY {current:,} runs through the count triggers in {seconds:.1f} s; "
        f"their {folded:,} delta rows folded in {fold_ms:.0f} ms; {entered:,} search entries "
        f"filled in {fill_ms:.0f} ms"
    )
    with connection_cursor() as cursor:
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('orchestrator_run', 'id'),"
            " (SELECT max(id) FROM orchestrator_run))"
        )
        cursor.execute("ANALYZE orchestrator_run")
        # Vacuumed now, as autovacuum keeps a table that takes writes all the time: left to
        # autovacuum, it would start on this partition while the pages are being timed.
        for name, (start, end) in partitions.ranges().items():
            if start <= now < end:
                cursor.execute(f'VACUUM (ANALYZE) "{name}"')
                if search.in_use():
                    cursor.execute(f'VACUUM (ANALYZE) "{search.partition_name(name)}"')


def recall_tasks(start_id: int) -> None:
    """Read the retries of the runs a new run may retry (`_root`: up to 200 ids back) into TASKS,
    so that runs added by another process (--skip-load) continue their attempts' numbers."""
    from django.db.models import Max

    from orchestrator.models import Run

    recent = Run.objects.filter(id__gte=start_id - 200, retry_of__isnull=False)
    TASKS.retries.update(recent.values_list("id", flat=True))
    roots = Run.objects.filter(retry_of_id__gte=start_id - 400).values_list("retry_of_id")
    for root, attempt in roots.annotate(last=Max("attempt")).order_by():
        TASKS.attempts[root] = max(TASKS.attempts.get(root, 1), attempt)


def runs_this_hour() -> int:
    from orchestrator.models import Run

    anchor = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    return Run.objects.filter(created_at__gte=anchor).count()


def connection_cursor():
    from django.db import connection

    return connection.cursor()


def set_indexes_aside() -> list[str]:
    """Drop the run table's indexes that back no constraint for the COPY (building an index once
    is far cheaper than maintaining it row by row); return the statements that re-create them."""
    from django.db import connection

    from orchestrator.models import Run

    table = Run._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND indexname NOT IN"
            " (SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)",
            [table, table],
        )
        indexes = cursor.fetchall()
        for name, _ in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
    # A partitioned table's index reads "ON ONLY" in pg_indexes: re-created that way it would be
    # an invalid shell with no index on any partition.
    return [definition.replace(" ON ONLY ", " ON ", 1) for _, definition in indexes]


def run_partitions(now: datetime, days: int = 32) -> None:
    """The run table's partitions of the loaded days (beat creates only the coming ones), so
    the pages read partitions as in production, not one large default partition."""
    from orchestrator import partitions

    partitions.cover((now - timedelta(days=days - 1)).date(), now.date())


def signature_cost(repeat: int = 20_000) -> float:
    """µs per signature of a typical failure detail (what the ingest path adds per failure)."""
    from orchestrator.fingerprint import signature

    detail = "ReadTimeout: read timed out after 10 s (request 'a1b2c3', id 4f2c-99)"
    started = time.perf_counter()
    for i in range(repeat):
        signature("news_api", "timeout", detail + str(i))
    return 1e6 * (time.perf_counter() - started) / repeat


def open_reviews(count: int, now: datetime) -> None:
    """Review items on the latest escalations: most open, some claimed, the rest resolved."""
    from django.contrib.auth.models import User

    from orchestrator.models import ReviewItem, Run

    claimer, _ = User.objects.get_or_create(username="bench-claimer")
    escalated = Run.objects.filter(status="escalated").order_by("-id")
    rows = escalated.values_list(
        "pk", "workflow_id", "failure_type", "source", "agent", "signature", "created_at"
    )[: count + count // 5]
    items = []
    for i, (pk, wf, ftype, source, agent, sig, created) in enumerate(rows):
        state = "resolved" if i >= count else ("claimed" if i % 10 == 0 else "open")
        items.append(
            ReviewItem(
                run_id=pk,
                workflow_id=wf,
                reason=f"{ftype} escalated by routing",
                failure_type=ftype,
                source=source,
                agent=agent,
                signature=sig,
                origin="built_in" if i % 3 else "agent",
                state=state,
                created_at=created,
                assignee=claimer if state == "claimed" else None,
                resolution="abort" if state == "resolved" else "",
                resolved_at=now if state == "resolved" else None,
            )
        )
    ReviewItem.objects.bulk_create(items, batch_size=2000)
    print(
        f"review items: {min(count, len(items)):,} open or claimed, "
        f"{max(0, len(items) - count):,} resolved"
    )


def fold_observations() -> None:
    """Fold /metrics' histograms and event counters: the whole loaded range the first time (an
    upgraded deployment's first fold), then time beat's periodic fold of the last hours."""
    from django.db import connection

    from insights import observations
    from insights.models import ObservationFold, ObservationHour

    started = time.perf_counter()
    first = ObservationFold.objects.exists()
    written = observations.fold()
    whole = time.perf_counter() - started
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {ObservationHour._meta.db_table}")
    periodic = []
    for _ in range(3):
        started = time.perf_counter()
        observations.fold()
        periodic.append(time.perf_counter() - started)
    print(
        f"observations: {written:,} rows in {whole:.1f} s ({'a later' if first else 'the first'} "
        f"fold; {ObservationHour.objects.count():,} stored); the periodic fold takes "
        f"{1000 * statistics.median(periodic):.0f} ms (median of 3)"
    )


def fold(groups_days: int = DAYS) -> None:
    """Fold the rollups (hourly and six-hour) and the failure groups of the whole loaded range
    (the beat tasks then keep the last hours), and time the groups' periodic fold."""
    from django.db import connection

    from insights import groups
    from insights.models import FailureGroup, RunRollup
    from insights.stats import refresh_rollups, rollup_lookback

    started = time.perf_counter()
    written = refresh_rollups(datetime.now(UTC) - timedelta(days=DAYS + 1))
    with connection.cursor() as cursor:
        # What autovacuum does after a big fold; done here because a fold rewrites every row (a
        # --skip-load rerun doubles the tables) and the server may run without autovacuum.
        for table in ("runrollup", "sixhourrollup", "sixhourwastedretries"):
            cursor.execute(f"VACUUM ANALYZE dashboard_{table}")
    print(
        f"rollups: {written:,} rows for {DAYS} days in {time.perf_counter() - started:.1f} s "
        f"({RunRollup.objects.count():,} stored)"
    )
    fold_observations()
    started = time.perf_counter()
    hours = groups.fold(datetime.now(UTC) - timedelta(days=groups_days, hours=1))
    whole = time.perf_counter() - started
    with connection.cursor() as cursor:
        for table in ("failuregroup", "failuregrouphour"):
            cursor.execute(f"VACUUM ANALYZE dashboard_{table}")
    periodic = []
    for _ in range(3):
        started = time.perf_counter()
        groups.fold()
        periodic.append(time.perf_counter() - started)
    lookback = rollup_lookback().total_seconds() / 3600
    print(
        f"failure groups: {FailureGroup.objects.count():,} groups, {hours:,} hourly rows, "
        f"{groups_days} days folded in {whole:.1f} s; the periodic fold of the last "
        f"{lookback:.0f} h takes {1000 * statistics.median(periodic):.0f} ms (median of 3)"
    )
