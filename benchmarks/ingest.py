"""Ingest benchmark: N runs through POST /api/v1/runs/batch, end to end, beside psycopg's COPY;
then single reports, in process beside a batched run's share and over HTTP in open loop.

    .venv/bin/python benchmarks/ingest.py [--n 100000] [--quick] [--database-url postgres://…]
        [--index-costs] [--delete-at 1000000]
        [--rates 250,500,1000,1500] [--open-seconds 10] [--skip-single]

Against PostgreSQL (DATABASE_URL, default postgres://postgres@127.0.0.1:5432/failsight_bench):
recreates that database, migrates it, creates a token, starts the real app server (gunicorn,
DEBUG off) on a free port, and sends the runs in batches of 1,000 over HTTP with httpx: auth,
rate limit, JSON parsing, validation, idempotency keys, one COPY per batch. It then
exports the stored rows, truncates the table and writes the very same rows back with COPY over as
many connections as the API had clients: the physical limit of the same table with the same
indexes, trigger and partitions; and into a plain table of the same columns, the machine's own
baseline. Prints the rates, their ratios and the batch goals as ratios (see `report`).
Then times beat's fill of the runs search's table over the same rows (the search's
trigram indexes, written off the request path: see orchestrator/search.py).
`--index-costs` repeats the COPY without each index in turn (and without the unique-claims
trigger, and into a plain table): what each costs a write. `--delete-at N` fills the table to N
runs over five days and times deleting one run and one workflow with its runs through the ORM.

Single reports (`POST /api/v1/runs`, one run per request) are measured twice, after a CHECKPOINT
(the batch phases' writes are flushed before, not during, their timing). In process: the
WSGI application called directly (what gunicorn calls), one report at a time (p50) and from 8
threads at once (wall time per report: concurrent reports share a commit), each beside the share
of one run in a batch of 1,000 measured in the same process, in alternating rounds; prints the
median of the rounds' ratios and their range. Over HTTP: the
Procfile's web server (gunicorn with `config.server.ThreadWorker`, 2 processes of 8 threads) fed
by `benchmarks/openloop.py` in its own process at fixed offered rates, whatever the answers:
p50/p95/p99 (a timeout counts as the client's timeout), goodput (2xx per second), shed (503),
other statuses, broken connections (closed by the server with a request on them: a keep-alive
connection it closed as the request left), timeouts, the CPU the server's workers and the
generator used, the best rate served with p99 <= 25 ms; then twice the capacity (the best goodput
at any rate offered), whose goodput is printed as a share of that capacity.

The database is dropped and the server stopped at the end, whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
from machine import cpu_probe_ms, cpu_ticks, percent, steal_since
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/failsight_bench"
FAILURE_TYPES = ["transient", "rate_limited", "auth_failure", "resource_missing", "timeout"]
FAILURE_TYPES += ["server_fault", "invalid_input", "unclassified"]
SOURCES = ["web_search", "news_api", "scholar_api", "internal_db"]
TOPICS = ["film", "music", "games", "publishing", "advertising"]


@dataclass(frozen=True)
class Rate:
    label: str
    rows: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.rows / self.seconds


# ---------------------------------------------------------------------------------------------
# The payload: a realistic mix of successes (some empty) and failures with partial results


def result(rng: random.Random, i: int, j: int) -> dict:
    return {
        "url": f"https://example.org/{i}/{j}",
        "title": f"Result {j} for run {i}",
        "excerpt": "lorem ipsum dolor sit amet " * rng.randint(1, 4),
    }


def make_run(rng: random.Random, i: int, workflows: list[int]) -> dict:
    """About 70 % ok with 0-5 results, 30 % errors with 0-3 partial results."""
    run: dict = {
        "agent": f"agent-{i % 7}",
        "source": rng.choice(SOURCES),
        "topic": rng.choice(TOPICS),
        "attempted": {"operation": "search", "query": f"AI impact on {rng.choice(TOPICS)} {i}"},
        "attempt": 1,
        "started_at": "2025-01-01T10:00:00Z",
        "finished_at": "2025-01-01T10:00:01.250Z",
        "idempotency_key": f"bench-{i}",
    }
    if workflows and rng.random() < 0.5:
        run["workflow"] = rng.choice(workflows)
    if rng.random() < 0.7:
        run |= {"status": "ok", "results": [result(rng, i, j) for j in range(rng.randint(0, 5))]}
        return run
    failure = rng.choice(FAILURE_TYPES)
    return run | {
        "status": "error",
        "failure_type": failure,
        "retryable": failure in ("transient", "rate_limited", "timeout", "server_fault"),
        "retry_after": 2.0 if failure == "rate_limited" else None,
        "status_code": rng.choice([429, 500, 503, 504, 401, 404]),
        "detail": f"{failure}: the provider failed on run {i}",
        "chain": ["httpx.HTTPStatusError", "RuntimeError"],
        "partial_results": [result(rng, i, j) for j in range(rng.randint(0, 3))],
        "alternatives": ["retry later", "use news_api instead"],
    }


def batches(n: int, size: int, workflows: list[int]) -> list[bytes]:
    rng = random.Random(2025)
    runs = [make_run(rng, i, workflows) for i in range(n)]
    return [json.dumps({"runs": runs[s : s + size]}).encode() for s in range(0, n, size)]


# ---------------------------------------------------------------------------------------------
# Database, app and server set-up


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def recreate_database(url: str, *, drop_only: bool = False) -> None:
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(with_database(url, "postgres"), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        if not drop_only:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def app_env(url: str) -> dict[str, str]:
    return os.environ | {
        "DATABASE_URL": url,
        "DEBUG": "0",
        "SECRET_KEY": "benchmark-only-secret-" + "x" * 40,
        "ALLOWED_HOSTS": "127.0.0.1",
        "LOG_LEVEL": "WARNING",
    }


def manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"manage.py {' '.join(args)} failed:\n{done.stderr}")
    return done.stdout.strip()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# The gunicorn master of each server started, by base URL.
SERVERS: dict[str, int] = {}


@contextmanager
def server(env: dict[str, str], workers: int, threads: int = 0) -> Iterator[str]:
    """Run gunicorn for the duration of the block; yield its base URL. With `threads`, the
    Procfile's threaded worker (`config.server.ThreadWorker`); else gunicorn's sync worker."""
    port = free_port()
    command = [sys.executable, "-m", "gunicorn", "config.wsgi", "-w", str(workers)]
    command += ["-b", f"127.0.0.1:{port}", "--timeout", "120", "--log-level", "warning"]
    if threads:
        command += ["--worker-class", "config.server.ThreadWorker", "--threads", str(threads)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
    SERVERS[f"http://127.0.0.1:{port}"] = process.pid  # whose workers' CPU to read
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(base, process)
        yield base
    finally:
        process.terminate()  # the master stops its workers gracefully
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: gunicorn's processes only
            process.wait()


def wait_until_up(base: str, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("gunicorn exited during start-up")
        try:
            if httpx.get(f"{base}/api/v1/openapi.json", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"gunicorn did not answer within {timeout:.0f} s")


# ---------------------------------------------------------------------------------------------
# The two measurements


def send_all(base: str, secret: str, bodies: list[bytes], clients: int) -> float:
    """POST every body with `clients` concurrent connections; return the elapsed seconds."""
    queue = iter(enumerate(bodies))
    lock = threading.Lock()
    failures: list[str] = []
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}

    def worker() -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
            while True:
                with lock:
                    item = next(queue, None)
                if item is None or failures:
                    return
                index, body = item
                response = client.post("/api/v1/runs/batch", content=body)
                statuses = {r["status"] for r in response.json().get("results", [])}
                if response.status_code != 200 or statuses != {"created"}:
                    failures.append(f"batch {index}: {response.status_code} {statuses}")

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise SystemExit(f"ingest failed: {failures[:3]}")
    return elapsed


def first_column(url: str, query: str) -> list:
    """The first column of `query`'s rows."""
    with psycopg.connect(url) as conn:
        return [row[0] for row in conn.execute(query)]


def export_rows(url: str) -> tuple[list[str], bytes]:
    """The stored runs' columns (all but id) and rows in COPY's text format; then empty the
    table and its unique claims, so that the same rows can be written back."""
    columns = first_column(
        url,
        "SELECT column_name FROM information_schema.columns "
        "WHERE table_name = 'orchestrator_run' AND column_name <> 'id' ORDER BY ordinal_position",
    )
    with psycopg.connect(url) as conn:
        exported = bytearray()
        select = sql.SQL("COPY (SELECT {} FROM orchestrator_run) TO STDOUT").format(
            sql.SQL(", ").join(map(sql.Identifier, columns))
        )
        with conn.cursor().copy(select) as copy:
            for block in copy:
                exported += block
    empty_table(url)
    return columns, bytes(exported)


def execute(url: str, *statements: str | sql.Composable) -> None:
    """Run `statements` in turn on a connection of their own, each committed on its own."""
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def empty_table(url: str, table: str = "orchestrator_run") -> None:
    execute(url, sql.SQL("TRUNCATE {} CASCADE").format(sql.Identifier(table)))
    if table == "orchestrator_run":
        execute(url, "TRUNCATE orchestrator_runkey")


def split_lines(data: bytes, parts: int) -> list[bytes]:
    """`data` in `parts` pieces of whole lines (COPY's text format: one row a line)."""
    pieces, start = [], 0
    for i in range(1, parts + 1):
        end = len(data) if i == parts else data.find(b"\n", len(data) * i // parts) + 1
        end = end or len(data)
        pieces.append(data[start:end])
        start = end
    return [p for p in pieces if p]


def copy_rows(
    url: str, columns: list[str], data: bytes, connections: int, table: str = "orchestrator_run"
) -> float:
    """COPY `data` into `table` over `connections` concurrent connections (a share of the
    lines each, each its own transaction); return the seconds until the last committed."""
    insert = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    errors: list[BaseException] = []
    pieces = split_lines(data, connections)
    conns = [psycopg.connect(url) for _ in pieces]
    barrier = threading.Barrier(len(pieces) + 1)

    def write(conn: psycopg.Connection, piece: bytes) -> None:
        try:
            barrier.wait()
            with conn.cursor().copy(insert) as copy:
                for offset in range(0, len(piece), 1 << 20):
                    copy.write(piece[offset : offset + (1 << 20)])
            conn.commit()
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    threads = [
        threading.Thread(target=write, args=(conn, piece))
        for conn, piece in zip(conns, pieces, strict=True)
    ]
    for thread in threads:
        thread.start()
    barrier.wait()  # every connection open: the clock starts with the first row
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for conn in conns:
        conn.close()
    if errors:
        raise SystemExit(f"COPY failed: {errors[0]}")
    return elapsed


def copy_same_rows(url: str, expected: int, connections: int) -> tuple[float, list, bytes]:
    """Export the stored runs, empty the table, COPY them back over `connections` connections;
    return the seconds the COPY took, and the columns and rows (for the index costs)."""
    columns, data = export_rows(url)
    elapsed = copy_rows(url, columns, data, connections)
    count = count_runs(url)
    if count != expected:
        raise SystemExit(f"COPY wrote {count} rows, expected {expected}")
    return elapsed, columns, data


# ---------------------------------------------------------------------------------------------
# What each index and constraint costs a write (--index-costs)


def run_indexes(url: str) -> list[tuple[str, str]]:
    """(name, definition) of the run table's indexes, the primary key aside. A partitioned
    table's index reads "ON ONLY" in pg_indexes: re-created that way it would be the parent's
    alone, with no partition's index under it, and every later figure would be measured
    without it too."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'orchestrator_run' "
            "AND indexname <> 'orchestrator_run_pkey' ORDER BY indexname"
        ).fetchall()
    return [(name, definition.replace(" ON ONLY ", " ON ", 1)) for name, definition in rows]


def insert_triggers(url: str) -> dict[str, list[str]]:
    """The run table's INSERT triggers: the unique claims, the count triggers (each
    workflow's counts and each minute's, `orchestrator.counters`), and the search table's
    entry for a run created before its mark (`orchestrator.search`)."""
    names = first_column(
        url,
        "SELECT tgname FROM pg_trigger WHERE tgrelid = 'orchestrator_run'::regclass "
        "AND NOT tgisinternal AND tgname LIKE '%\\_ins' ORDER BY tgname",
    )
    return {
        "the claims trigger": ["run_claim_keys"],
        "the count triggers": names,
        "the search's trigger for runs created before its mark": ["runsearch_backdated"],
    }


def index_costs(url: str, columns: list[str], data: bytes, connections: int) -> list[Rate]:
    """COPY the same rows with everything, then without each index in turn, without the
    unique-claims trigger, without the count triggers, with everything again (the machine
    drifts: the reference is the faster of the two), and into a plain table of the same
    columns (no index, no trigger, not partitioned). Each figure is the best of two COPYs; the
    write cost of each part is the time it adds per row."""
    rows = data.count(b"\n")

    def timed(label: str, table: str = "orchestrator_run") -> Rate:
        best = float("inf")
        for _ in range(2):
            empty_table(url, table)
            best = min(best, copy_rows(url, columns, data, connections, table))
        return Rate(label, rows, best)

    rates = [timed("all indexes and triggers")]
    for name, definition in run_indexes(url):
        execute(url, sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
        try:
            rates.append(timed(f"without {name}"))
        finally:
            execute(url, definition)
    for label, names in insert_triggers(url).items():
        switch = sql.SQL("ALTER TABLE orchestrator_run {} TRIGGER {}")
        execute(url, *(switch.format(sql.SQL("DISABLE"), sql.Identifier(n)) for n in names))
        try:
            rates.append(timed(f"without {label}"))
        finally:
            execute(url, *(switch.format(sql.SQL("ENABLE"), sql.Identifier(n)) for n in names))
    rates.append(timed("all indexes and triggers, again"))
    rates.append(plain_rate(url, columns, data, connections, tries=2))
    return rates


def plain_rate(url: str, columns: list[str], data: bytes, connections: int, tries: int = 1) -> Rate:
    """COPY the same rows over as many connections into a plain table of the same columns (no
    index, no trigger, not partitioned): the machine's own baseline for a write, the best of
    `tries`. The table is dropped after."""
    execute(url, "CREATE TABLE bench_plain (LIKE orchestrator_run INCLUDING DEFAULTS)")
    try:
        seconds = float("inf")
        for _ in range(tries):
            empty_table(url, "bench_plain")
            seconds = min(seconds, copy_rows(url, columns, data, connections, "bench_plain"))
    finally:
        execute(url, "DROP TABLE bench_plain")
    return Rate(f"COPY plain table x{connections}", data.count(b"\n"), seconds)


def cost_report(rates: list[Rate]) -> str:
    reference = min((r for r in rates if r.label.startswith("all ")), key=lambda r: r.seconds)
    lines = [f"{'COPY into the run table':<44} {'rows/s':>10} {'write cost µs/row':>18}"]
    for r in rates:
        full = r.label.startswith("all ")
        cost = "" if full else f"{(reference.seconds - r.seconds) / r.rows * 1e6:.1f}"
        lines.append(f"{r.label:<44} {r.per_second:>10,.0f} {cost:>18}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Deleting one run and one workflow with its runs at N runs (--delete-at)

FILL = """
INSERT INTO orchestrator_run (agent, source, topic, capability, operation, attempted, attempt,
    status, result_count, results, failure_type, signal, provider_code, exception_type, detail,
    exception_chain, partial_results, partial_count, alternatives, signature, slot, deliveries,
    calls, lease_owner, idempotency_key, request_hash, trace_id, span_id, decision,
    decision_reason, switch_to, workflow_id, token_id, created_at)
SELECT 'agent-' || (g %% 7), 'source-' || (g %% 4), 'topic', '', 'search', '{}', 1,
    CASE WHEN g %% 3 = 0 THEN 'failed' ELSE 'succeeded' END, 0, '[]',
    CASE WHEN g %% 3 = 0 THEN 'timeout' END, '', '', '', '', '[]', '[]', 0, '[]',
    CASE WHEN g %% 3 = 0 THEN 'sig' || (g %% 50) ELSE '' END, '', 0, 0, '',
    'fill-' || g, '', '', '', '', '', '', %(workflow)s, %(token)s,
    now() - (g %% 5) * interval '1 day' - (g %% 86400) * interval '1 second'
FROM generate_series(1, %(n)s) AS g
"""

DELETE_TIMING = """
import statistics, time
from django.db import connection
from django.test.utils import CaptureQueriesContext
from orchestrator.models import Run, Workflow
runs = list(Run.objects.filter(workflow__isnull=True).order_by("-id")[:12])
Run.objects.filter(pk=runs[0].pk).delete()  # warm: connection, plans
times = []
for run in runs[1:6]:
    started = time.perf_counter(); Run.objects.filter(pk=run.pk).delete()
    times.append(time.perf_counter() - started)
bare = []  # the baseline: one DELETE statement, no references looked at
with connection.cursor() as cursor:
    for run in runs[6:]:
        started = time.perf_counter()
        cursor.execute("DELETE FROM orchestrator_run WHERE id = %s", [run.pk])
        bare.append(time.perf_counter() - started)
wf = Workflow.objects.get(name="delete-me")
rows = wf.runs.count()
with CaptureQueriesContext(connection) as queries:
    started = time.perf_counter(); wf.delete(); whole = time.perf_counter() - started
one, bare = statistics.median(times), statistics.median(bare)
print(f"{one:.4f} {whole:.4f} {rows} {len(queries)} {bare:.4f}")
"""


def delete_costs(url: str, env: dict[str, str], n: int) -> str:
    """Fill the table to `n` runs over five days (1,000 of them in one workflow), then delete a
    run and that workflow through the ORM, as an operator or retention would; return a line."""
    workflow = int(
        manage(
            env,
            "shell",
            "-c",
            "from orchestrator.models import Workflow; "
            "print(Workflow.objects.create(name='delete-me').pk)",
        ).splitlines()[-1]
    )
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        conn.execute(FILL, {"n": n - 1000, "workflow": None, "token": None})
        conn.execute(
            FILL.replace("'fill-'", "'fill-wf-'"), {"n": 1000, "workflow": workflow, "token": None}
        )
        fill = time.perf_counter() - started
        conn.execute("ANALYZE orchestrator_run")
    timing = manage(env, "shell", "-c", DELETE_TIMING).splitlines()[-1].split()
    one, whole, rows, queries = float(timing[0]), float(timing[1]), timing[2], timing[3]
    bare = float(timing[4])
    return (
        f"at {n:,} runs (filled in {fill:.0f} s): deleting one run {one * 1000:.1f} ms "
        f"(median of 5; the bare DELETE of one run, no references: {bare * 1000:.1f} ms, "
        f"ratio {one / bare:.1f}x), one workflow with its {rows} runs {whole * 1000:.1f} ms "
        f"({queries} queries)"
    )


def count_runs(url: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM orchestrator_run").fetchone()[0]


# The batch goals in the figures they were set in (runs/s, on the machine that measured a plain
# table at more than 500,000 rows/s), and as the ratios that carry over to a slower or faster
# machine: COPY into the run table at least a tenth of a plain table's rate (50,000 of 500,000:
# with a faster plain table the tenth is a lower bar, so 10 % is the strictest reading), and the
# batch API at least 40 % of COPY (20,000 of 50,000).
BATCH_GOAL, COPY_GOAL, PLAIN_WHEN_SET = 20_000, 50_000, 500_000


def search_fill_rate(url: str, env: dict[str, str]) -> Rate:
    """Time beat's fill of the runs search's table (`orchestrator.search.catch_up`, in slices of
    100,000 runs) over every run in the table, from an empty search table: the write cost the
    trigram indexes have off the request path. Timed inside the child, after Django's start."""
    reset_search_table(url)
    out = manage(
        env,
        "shell",
        "-c",
        "import time; from orchestrator import search; started = time.perf_counter(); "
        "added = search.catch_up(seconds=3600); print(added, time.perf_counter() - started)",
    )
    added, seconds = out.splitlines()[-1].split()
    # The same rows COPYed again later would be older than the mark the fill left: the
    # search's trigger for runs created before the mark would enter every one of them.
    reset_search_table(url)
    return Rate("search table fill (beat)", int(added), float(seconds))


def reset_search_table(url: str) -> None:
    """No entries, and the mark before any run (as the migration leaves it on an empty table)."""
    execute(
        url,
        "TRUNCATE orchestrator_runsearch",
        "UPDATE orchestrator_runsearchstate SET through = '1900-01-01 00:00:00+00'",
    )


def report(api: Rate, copy: Rate, plain: Rate, fill: Rate | None = None) -> str:
    lines = [
        f"{'path':<28} {'rows':>9} {'seconds':>9} {'rows/s':>10}",
        *(
            f"{r.label:<28} {r.rows:>9,} {r.seconds:>9.2f} {r.per_second:>10,.0f}"
            for r in (api, copy, plain)
        ),
    ]
    for label, ratio, goal, of in (
        ("ratio API / COPY", api.per_second / copy.per_second, BATCH_GOAL / COPY_GOAL, "COPY"),
        (
            "ratio COPY / plain table",
            copy.per_second / plain.per_second,
            COPY_GOAL / PLAIN_WHEN_SET,
            "plain",
        ),
    ):
        verdict = "met" if ratio >= goal else "not met"
        lines.append(
            f"{label:<28} {'':>9} {'':>9} {ratio:>10.1%}   goal >= {goal:.0%} of {of}: {verdict}"
        )
    for label, rate, goal in (("batch API", api, BATCH_GOAL), ("COPY", copy, COPY_GOAL)):
        verdict = "met" if rate.per_second >= goal else "not met"
        lines.append(f"{label} in absolute terms: goal {goal:,} rows/s: {verdict}")
    if fill:
        # The search's trigram indexes are written by beat a few seconds behind, not by the
        # COPY: what a sustained load pays for both, one after the other, is said too.
        both = 1 / (1 / copy.per_second + 1 / fill.per_second)
        lines.append(
            f"{fill.label}: {fill.rows:,} runs, {fill.per_second:,.0f} rows/s "
            f"({1e6 / fill.per_second:.1f} µs a run, off the request path); COPY and its "
            f"fill one after the other: {both:,.0f} rows/s"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Single reports: in process beside a batched run's share, and over HTTP in open loop

# The goal for a single report over HTTP: p99 within this many milliseconds.
P99_GOAL_MS = 25.0


def wsgi_environ(path: str, body: bytes, secret: str, key: str = "") -> dict:
    """The environ gunicorn would pass for this POST."""
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": "127.0.0.1",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": f"Bearer {secret}",
        "wsgi.input": io.BytesIO(body),
        "wsgi.url_scheme": "http",
    }
    if key:
        environ["HTTP_IDEMPOTENCY_KEY"] = key
    return environ


# In process, the three figures are measured in rounds, each round one after the other: a batch
# of 1,000, reports one at a time, reports from 8 threads. Each ratio is taken within its round
# and the median over the rounds is printed: these machines' speed drifts by half within a
# minute, which a ratio of figures measured minutes apart would take for the code's.
IN_PROCESS_ROUNDS = 8
IN_PROCESS_THREADS = 8


def in_process_child(count: int, rounds: int = IN_PROCESS_ROUNDS) -> None:
    """Measure in this process (DATABASE_URL set by the parent); print the figures as JSON.

    `count` reports one at a time and `count` from the threads in all, over the rounds. The
    threads are made once and wait between rounds, as a server's threads do between requests
    (gunicorn's live as long as their worker)."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    sys.path.insert(0, str(ROOT))
    from config.wsgi import application as app  # what gunicorn calls
    from orchestrator.models import ApiToken

    _, secret = ApiToken.issue("in-process")
    rng = random.Random(7)

    def call(environ: dict, expected: str) -> None:
        def start_response(status: str, headers: list) -> None:
            if not status.startswith(expected):
                raise SystemExit(f"{environ['PATH_INFO']} answered {status}")

        b"".join(app(environ, start_response))

    def single(i: int) -> dict:
        run = make_run(rng, i, [])
        key = run.pop("idempotency_key") + "-single"
        return wsgi_environ("/api/v1/runs", json.dumps(run).encode(), secret, key)

    workers = IN_PROCESS_THREADS
    per_round = max(workers, count // rounds)
    serial = [[single(i + r * per_round) for i in range(per_round)] for r in range(rounds)]
    offset = rounds * per_round
    threaded = [
        [single(offset + i + r * per_round) for i in range(per_round)] for r in range(rounds)
    ]
    for environ in [single(2 * offset + i) for i in range(100)]:  # warm up
        call(environ, "201")
    warm = [make_run(rng, 20_000_000 + i, []) for i in range(1000)]
    call(wsgi_environ("/api/v1/runs/batch", json.dumps({"runs": warm}).encode(), secret), "200")
    start, done = threading.Barrier(workers + 1), threading.Barrier(workers + 1)

    # Each round's interpreter CPU (time.thread_time: this thread's user and system time), summed
    # over the threads. Every part of a report runs on its own request thread (a group's leader
    # is one of them), so the sum is all the CPU this process spent on the round's reports.
    thread_cpu = [[0.0] * workers for _ in range(rounds)]

    def worker(t: int) -> None:
        for r in range(rounds):
            start.wait()
            cpu = time.thread_time()
            for environ in threaded[r][t::workers]:
                call(environ, "201")
            thread_cpu[r][t] = time.thread_time() - cpu
            done.wait()

    threads = [threading.Thread(target=worker, args=(t,), daemon=True) for t in range(workers)]
    for thread in threads:
        thread.start()
    names = ("single_p50", "single_concurrent", "batch_share")
    figures: dict[str, list[float]] = {n: [] for n in names + tuple(f"{n}_cpu" for n in names)}
    for r in range(rounds):
        runs = [make_run(rng, 10_000_000 + r * 1000 + i, []) for i in range(1000)]
        body = json.dumps({"runs": runs}).encode()
        started, cpu = time.perf_counter(), time.thread_time()
        call(wsgi_environ("/api/v1/runs/batch", body, secret), "200")
        figures["batch_share"].append((time.perf_counter() - started) / 1000)
        figures["batch_share_cpu"].append((time.thread_time() - cpu) / 1000)
        times = []
        cpu = time.thread_time()
        for environ in serial[r]:
            started = time.perf_counter()
            call(environ, "201")
            times.append(time.perf_counter() - started)
        figures["single_p50_cpu"].append((time.thread_time() - cpu) / len(serial[r]))
        figures["single_p50"].append(statistics.median(times))
        start.wait()
        started = time.perf_counter()
        done.wait()
        figures["single_concurrent"].append((time.perf_counter() - started) / per_round)
        figures["single_concurrent_cpu"].append(sum(thread_cpu[r]) / per_round)
    shares = figures["batch_share"]
    answer: dict[str, object] = {name: statistics.median(v) for name, v in figures.items()}
    for name in ("single_p50", "single_concurrent", "single_p50_cpu", "single_concurrent_cpu"):
        answer[f"{name}_ratios"] = [v / b for v, b in zip(figures[name], shares, strict=True)]
    print(json.dumps(answer))


def in_process(env: dict[str, str], count: int, rounds: int) -> dict:
    probe, ticks = cpu_probe_ms(), cpu_ticks()
    done = subprocess.run(
        [
            sys.executable,
            __file__,
            "--in-process-child",
            str(count),
            "--in-process-rounds",
            str(rounds),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"the in-process measurement failed:\n{done.stderr}")
    machine = {"probe": (probe, cpu_probe_ms()), "steal": steal_since(ticks)}
    return json.loads(done.stdout.strip().splitlines()[-1]) | machine


def worker_cpu_seconds(master: int) -> float:
    """CPU seconds (user + system) used so far by the children of process `master`."""
    total = 0
    for children in Path(f"/proc/{master}/task").glob("*/children"):
        for pid in children.read_text().split():
            with contextlib.suppress(OSError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


def open_loop(base: str, secret: str, rate: float, seconds: float, tag: str) -> dict:
    """One open-loop run by benchmarks/openloop.py in its own process; its JSON figures."""
    port = urlsplit(base).port
    command = [sys.executable, str(ROOT / "benchmarks" / "openloop.py"), "--port", str(port)]
    command += ["--token", secret, "--rate", str(rate), "--duration", str(seconds)]
    command += ["--prefix", tag]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120)
    if done.returncode:
        raise SystemExit(f"openloop.py failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# Probing for the capacity stops here: beyond it the load generator itself (one process on the
# same two cores) falls behind its schedule, which its `late` column counts.
PROBE_MAX_RATE = 12_000.0

# "Twice the capacity" is offered again (at most this many times in all) while it served more
# than NOT_CAPACITY times the capacity it was twice of.
OVERLOAD_TRIES = 3
NOT_CAPACITY = 1.05


def open_loop_rows(
    env: dict[str, str],
    secret: str,
    rates: list[float],
    seconds: float,
    shape: tuple[int, int],
    probe_up_to: float = PROBE_MAX_RATE,
) -> list:
    """Each rate's figures, then twice the capacity's, with the server's CPU and load average."""
    rows = []
    # One token sends everything: its rate limit (6,000 a minute by default) is not measured here.
    env = env | {"API_RATE_LIMIT_PER_MINUTE": "0"}
    with server(env, workers=shape[0], threads=shape[1]) as base:
        master = SERVERS[base]
        open_loop(base, secret, min(rates), min(2.0, seconds), "warm")  # imports, pools
        # Each run its own keys: a rate offered twice must not replay the first run's reports
        # (a replayed report costs the server about 2.5 times a new one).
        for i, rate in enumerate(rates):
            rows.append(one_row(base, secret, master, rate, seconds, f"r{i}-{rate:g}"))
        # A server that kept up with every rate offered has not shown its capacity: twice the
        # highest rate would not be an overload. Offer more until it falls behind.
        while kept_up(rows[-1]) and rows[-1]["offered"] * 2 <= probe_up_to:
            rate = rows[-1]["offered"] * 2
            row = one_row(base, secret, master, rate, seconds, f"probe-{rate:g}")
            row["label"] = f"{rate:,.0f}/s (probe)"
            rows.append(row)
        capacity = measured_capacity(rows)
        for attempt in range(OVERLOAD_TRIES if capacity else 0):
            overload = one_row(base, secret, master, 2 * capacity, seconds, f"overload-{attempt}")
            rows.append(overload)
            if overload["goodput"] <= NOT_CAPACITY * capacity or attempt == OVERLOAD_TRIES - 1:
                overload["label"] = f"2 x capacity ({capacity:,.0f}/s)"
                overload["of_capacity"] = overload["goodput"] / capacity
                break
            # Served clearly more than the capacity read: that was not the capacity (the last rate
            # may have been missed by its p99 alone, the generator late on its schedule), so
            # twice it was no overload. Offer twice what was served now.
            overload["label"] = f"{2 * capacity:,.0f}/s (no overload)"
            capacity = measured_capacity(rows)
    return rows


def kept_up(row: dict) -> bool:
    """Whether the server served (nearly) everything offered at this rate, in time."""
    return (
        row["goodput"] >= 0.97 * row["offered"]
        and not row["shed"]
        and not row["timeouts"]
        and (row["p99"] or 0.0) <= P99_GOAL_MS
    )


def measured_capacity(rows: list[dict]) -> float:
    """The most the server served per second at any rate offered: its capacity. Not the best
    rate it kept up with: between the rates offered that sits well below what it can serve (it
    kept up with 500/s and served 786/s of 1,500/s), and "twice the capacity" then offered less
    than twice, flattering the share served."""
    return max([r["goodput"] for r in rows] or [0.0])


def one_row(base: str, secret: str, master: int, rate: float, seconds: float, tag: str) -> dict:
    load, probe = os.getloadavg()[0], cpu_probe_ms()
    cpu = worker_cpu_seconds(master)
    ticks = cpu_ticks()
    row = open_loop(base, secret, rate, seconds, tag)
    row["server_cpu"] = (worker_cpu_seconds(master) - cpu) / row["wall_seconds"]
    row["steal"] = steal_since(ticks)
    row["probe"] = probe
    row["load"] = load
    row["label"] = f"{rate:,.0f}/s"
    return row


def ratio(values: list[float]) -> str:
    """The median of per-round ratios, with their range."""
    return f"{statistics.median(values):5.1f} (rounds {min(values):.1f}-{max(values):.1f})"


def single_report(figures: dict, rows: list, shape: tuple[int, int]) -> list[str]:
    share = figures["batch_share"] * 1000
    lines = [
        f"single reports in process (WSGI app called directly; ms per run, medians of"
        f" {len(figures['single_p50_ratios'])} rounds; each ratio taken within its round):",
        f"  this machine meanwhile: a fixed pure-Python loop {figures['probe'][0]:.1f} ms before"
        f" and {figures['probe'][1]:.1f} ms after, CPU stolen by the hypervisor"
        f" {percent(figures['steal'])}",
        f"  one at a time, p50        {figures['single_p50'] * 1000:8.3f}"
        f"   = {ratio(figures['single_p50_ratios'])} x a batched run's share",
        f"  {IN_PROCESS_THREADS} threads at once         {figures['single_concurrent'] * 1000:8.3f}"
        f"   = {ratio(figures['single_concurrent_ratios'])} x a batched run's share",
        f"  batch of 1,000, per run   {share:8.3f}",
        "  the interpreter CPU in those figures (time.thread_time of the threads that served them;"
        " ms per run, the ratio to the batched run's share of wall-clock time as above):",
        f"    one at a time           {figures['single_p50_cpu'] * 1000:8.3f}"
        f"   = {ratio(figures['single_p50_cpu_ratios'])} x",
        f"    {IN_PROCESS_THREADS} threads at once       "
        f"{figures['single_concurrent_cpu'] * 1000:8.3f}"
        f"   = {ratio(figures['single_concurrent_cpu_ratios'])} x"
        " (most of it under the one GIL, one thread at a time: the floor of the figure above)",
        f"    batch of 1,000, per run {figures['batch_share_cpu'] * 1000:8.3f}",
        f"single reports over HTTP, open loop ({shape[0]} gunicorn processes x {shape[1]} threads;"
        " latency from each request's scheduled time, a timeout counted as 2 s; load, steal and"
        " the pure-Python loop's time are the machine's as each rate began):",
        f"  {'offered':<26}{'p50':>7}{'p95':>8}{'p99':>8}{'goodput':>9}{'shed':>7}"
        f"{'other':>6}{'broken':>7}{'timeouts':>9}{'late':>6}{'server cpu':>11}{'gen cpu':>8}"
        f"{'load':>6}{'steal':>7}{'loop ms':>8}",
    ]

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    for r in rows:
        lines.append(
            f"  {r['label']:<26}{ms(r['p50']):>7}{ms(r['p95']):>8}{ms(r['p99']):>8}"
            f"{r['goodput']:>9,.0f}{r['shed']:>7}{sum(r['other'].values()):>6}{r['broken']:>7}"
            f"{r['timeouts']:>9}{r['late']:>6}"
            f"{r['server_cpu']:>10.0%}{r['cpu_seconds'] / r['wall_seconds']:>8.0%}"
            f"{r['load']:>6.1f}{percent(r['steal']):>7}{r['probe']:>8.1f}"
        )
    fits = [r for r in rows if "of_capacity" not in r and (r["p99"] or 1e9) <= P99_GOAL_MS]
    best = max(fits, key=lambda r: r["goodput"], default=None)
    lines.append(
        f"  best offered rate with p99 <= {P99_GOAL_MS:g} ms: "
        + (f"{best['label']} ({best['goodput']:,.0f} served/s)" if best else "none")
    )
    measured = [r for r in rows if "of_capacity" not in r]
    for r in rows:
        if "of_capacity" in r:
            lines.append(
                f"  under {r['label']}: goodput {r['of_capacity']:.0%} of capacity,"
                f" 503 p99 {ms(r['p99_shed'])} ms, timeouts {r['timeouts']}"
            )
            if measured and kept_up(measured[-1]):
                lines.append(
                    f"  (not an overload: the server kept up with every rate offered, up to"
                    f" {measured[-1]['label']}; its capacity is above that)"
                )
    return lines


# ---------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="runs to send (default 100,000)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 3,000 runs")
    parser.add_argument("--batch", type=int, default=1000, help="runs per request")
    # A batch spends about half its time waiting on PostgreSQL: with 2 cores, 4 workers (and 4
    # connections feeding them) overlap one request's Python with another's database work.
    parser.add_argument("--workers", type=int, default=4, help="gunicorn workers (default 4)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent connections (4)")
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", DEFAULT_URL))
    parser.add_argument(
        "--index-costs",
        action="store_true",
        help="also COPY the same rows without each index in turn, without the claims trigger "
        "and into a plain table: each one's write cost per row",
    )
    parser.add_argument(
        "--delete-at",
        type=int,
        default=0,
        metavar="N",
        help="also fill the table to N runs and time deleting one run and one workflow",
    )
    parser.add_argument(
        "--rates", default="250,500,1000,1500", help="single reports/s offered, comma-separated"
    )
    parser.add_argument("--open-seconds", type=float, default=10.0, help="seconds per rate")
    parser.add_argument("--web-processes", type=int, default=2, help="open loop: gunicorn workers")
    parser.add_argument("--web-threads", type=int, default=8, help="open loop: threads each")
    parser.add_argument("--skip-single", action="store_true", help="batch and COPY only")
    parser.add_argument("--single-only", action="store_true", help="single reports only")
    parser.add_argument("--in-process-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--in-process-rounds", type=int, default=IN_PROCESS_ROUNDS, help=argparse.SUPPRESS
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.in_process_child:
        in_process_child(args.in_process_child, args.in_process_rounds)
        return
    n = 3000 if args.quick else args.n
    url = args.database_url
    if not url.startswith(("postgres://", "postgresql://")):
        raise SystemExit("the benchmark needs PostgreSQL: set DATABASE_URL or --database-url")
    load_before = os.getloadavg()[0]  # the machine may be shared: say how busy it was
    recreate_database(url)
    try:
        env = app_env(url)
        manage(env, "migrate", "--noinput")
        secret = manage(env, "createtoken", "benchmark").splitlines()[-1]
        workflows = manage(
            env,
            "shell",
            "-c",
            "from orchestrator.models import Workflow; "
            "print(','.join(str(Workflow.objects.create(name=f'bench {i}').pk) for i in range(5)))",
        )
        workflow_ids = [int(pk) for pk in workflows.splitlines()[-1].split(",")]
        costs = deletes = None
        if not args.single_only:
            bodies = batches(n, args.batch, workflow_ids)
            with server(env, args.workers) as base:
                api_seconds = send_all(base, secret, bodies, args.clients)
            stored = count_runs(url)
            if stored != n:
                raise SystemExit(f"the API stored {stored} runs, expected {n}")
            copy_seconds, columns, data = copy_same_rows(url, n, args.clients)
            plain = plain_rate(url, columns, data, args.clients)
            fill = search_fill_rate(url, env)
            costs = index_costs(url, columns, data, args.clients) if args.index_costs else None
        single_lines = [] if args.skip_single else single_reports(env, secret, args)
        if args.delete_at and not args.single_only:
            deletes = delete_costs(url, env, args.delete_at)
    finally:
        recreate_database(url, drop_only=True)
    if args.single_only:
        print(f"ingest benchmark, single reports only; load average before: {load_before:.1f}")
        print("\n".join(single_lines))
        return
    print(
        f"ingest benchmark: {n:,} runs, batches of {args.batch}, "
        f"{args.workers} gunicorn workers, {args.clients} client connections "
        f"(and as many COPY connections), load average before: {load_before:.2f}"
    )
    print(
        report(
            Rate("POST /api/v1/runs/batch", n, api_seconds),
            Rate(f"COPY orchestrator_run x{args.clients}", n, copy_seconds),
            plain,
            fill,
        )
    )
    if costs:
        print()
        print(cost_report(costs))
    if deletes:
        print()
        print(deletes)
    for line in single_lines:
        print(line)


def checkpoint(url: str) -> None:
    """Write out what the batch and COPY phases left dirty, so that single reports are not timed
    through the checkpoint of hundreds of thousands of rows written before them (it flushed
    during the open loop and doubled its p99). Needs a superuser (or pg_checkpoint); skipped,
    with a note, without one."""
    try:
        execute(url, "CHECKPOINT")
    except psycopg.Error as exc:
        print(f"(no CHECKPOINT before the single reports: {exc})", file=sys.stderr)


def single_reports(env: dict[str, str], secret: str, args: argparse.Namespace) -> list[str]:
    """Both single-report measurements (the quick run: a few seconds at small rates)."""
    checkpoint(args.database_url)
    # The smoke run: 2 rounds, each with its batch of 1,000.
    figures = in_process(env, 50, 2) if args.quick else in_process(env, 1000, IN_PROCESS_ROUNDS)
    rates = [100.0] if args.quick else [float(r) for r in args.rates.split(",")]
    shape = (args.web_processes, args.web_threads)
    seconds = 1.0 if args.quick else args.open_seconds
    probe_up_to = 400.0 if args.quick else PROBE_MAX_RATE  # the smoke run probes twice
    rows = open_loop_rows(env, secret, rates, seconds, shape, probe_up_to)
    return single_report(figures, rows, shape)


if __name__ == "__main__":
    main()
