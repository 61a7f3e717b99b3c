"""Ingest benchmark: batches through POST /api/v1/runs/batch beside COPY of the same rows, then
single reports over HTTP in open loop, against the web server as shipped and stock gunicorn.

    .venv/bin/python benchmarks/ingest.py [--n 100000] [--quick] [--database-url postgres://…]
        [--rates 500,1000,1500,2000] [--open-seconds 10] [--skip-batch] [--skip-single] [--priced]

Against PostgreSQL (DATABASE_URL, default postgres://postgres@127.0.0.1:5432/failsight_bench):
recreates that database, migrates it, creates a token, and drops it at the end whatever happens.

Batches: N runs in batches of 1,000 over 4 connections to the web server as shipped
(`config.serve`, DEBUG off, `--batch-processes` processes): auth, JSON parsing, validation,
idempotency keys, one COPY per batch. The stored rows are then exported, the table emptied, and
the same rows written back with COPY over as many connections: the table's own limit, the batch
API's baseline.

Single reports (one run per request): `benchmarks/openloop.py` in its own process offers each
rate of `--rates` for `--open-seconds`, whatever the answers, to two servers in turn at each rate
(so that both meet the same machine): the server as shipped (granian through `config.serve`, its
defaults) and the baseline, stock gunicorn with gthread workers (as many processes, WEB_THREADS
threads each) serving Django's plain WSGI application. Then twice the shipped server's capacity
(the most it served per second at any rate) is offered to both. Per row: served per second, p50
and p99 (from each request's scheduled time; a client timeout counts as its 2 s), 503s, client
timeouts, the ratios to the baseline, and the machine's state as the row began (load average, CPU
stolen by the hypervisor, a fixed pure-Python loop's time: `benchmarks/machine.py`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
from machine import cpu_probe_ms, cpu_ticks, percent, steal_since
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from config import serve  # noqa: E402  # the shipped server's settings, read as it reads them

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/failsight_bench"
FAILURE_TYPES = ["transient", "rate_limited", "auth_failure", "resource_missing", "timeout"]
FAILURE_TYPES += ["server_fault", "invalid_input", "unclassified"]
SOURCES = ["web_search", "news_api", "scholar_api", "internal_db"]
TOPICS = ["film", "music", "games", "publishing", "advertising"]
MODELS = ["gpt-4o", "gpt-4o-mini", "claude-sonnet", "unpriced-model"]
BATCH_GOAL = 20_000  # runs/s through the batch API
P99_GOAL_MS = 25.0
OVERLOAD_GOODPUT_GOAL = 0.8  # of the capacity, at twice the capacity
CLIENT_TIMEOUT = 2.0  # seconds: openloop.py's default


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
    if PRICED:
        tokens = {"input_tokens": rng.randint(100, 20_000), "output_tokens": rng.randint(10, 2_000)}
        run["usage"] = tokens | {"cached_tokens": tokens["input_tokens"] // 4}
        run["usage"]["model"] = rng.choice(MODELS)
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


# --priced: every run reports its tokens, priced at ingest from a price table of a few models,
# three of the four sources priced per call, and earlier prices the runs' start leaves behind.
PRICED = False
PRICE_TABLE = """
from datetime import UTC, datetime
from decimal import Decimal as D
from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import Price
for year in (2023, 2024):
    at = datetime(year, 1, 1, tzinfo=UTC)
    for name, prices in (("gpt-4o", "2.5 10 1.25"), ("gpt-4o-mini", "0.15 0.6 0.075"),
                         ("claude-sonnet", "3 15 0.3")):
        i, o, c = map(D, prices.split())
        save_policy_change(Price(kind="model", name=name, effective_from=at, input_per_million=i,
                                 output_per_million=o, cached_per_million=c), None)
    for source in ("web_search", "news_api", "scholar_api"):
        save_policy_change(Price(kind="source_call", name=source, effective_from=at,
                                 per_call=D("0.005")), None)
"""


def batches(n: int, size: int, workflows: list[int]) -> list[bytes]:
    rng = random.Random(2025)
    runs = [make_run(rng, i, workflows) for i in range(n)]
    return [json.dumps({"runs": runs[s : s + size]}).encode() for s in range(0, n, size)]


# ---------------------------------------------------------------------------------------------
# Database, app and servers


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def recreate_database(url: str, *, drop_only: bool = False) -> None:
    name = sql.Identifier(urlsplit(url).path.lstrip("/"))
    with psycopg.connect(with_database(url, "postgres"), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))
        if not drop_only:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(name))


def execute(url: str, *statements: str | sql.Composable) -> list:
    """Run `statements` in turn, each committed on its own; the last one's rows, if any."""
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in statements:
            cursor = conn.execute(statement)
        return cursor.fetchall() if cursor.description else []


def app_env(url: str) -> dict[str, str]:
    return os.environ | {
        "DATABASE_URL": url,
        "DEBUG": "0",
        "SECRET_KEY": "benchmark-only-secret-" + "x" * 40,
        "ALLOWED_HOSTS": "127.0.0.1",
        "LOG_LEVEL": "WARNING",
        # One token sends everything: its rate limit is not what is measured here.
        "API_RATE_LIMIT_PER_MINUTE": "0",
        "WEB_ACCESS_LOG": "0",
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


SHIPPED, BASELINE = "shipped", "baseline"


def server_command(kind: str, port: int, env: dict[str, str]) -> tuple[list[str], dict]:
    """The command line of the server as shipped (`python -m config.serve`, as the Procfile)
    or of the baseline: stock gunicorn gthread, as many processes and threads, plain Django."""
    env = env | {"BIND": f"127.0.0.1:{port}"}
    if kind == SHIPPED:
        return [sys.executable, "-m", "config.serve"], env
    shape = serve.from_env()  # the environment here is the server's, BIND aside
    command = [sys.executable, "-m", "gunicorn", "config.wsgi:django_application"]
    command += ["--worker-class", "gthread", "--workers", str(shape.processes)]
    command += ["--threads", str(shape.threads), "--bind", env["BIND"], "--log-level", "warning"]
    return command, env


@contextmanager
def server(kind: str, env: dict[str, str]) -> Iterator[tuple[str, int]]:
    """Run a server for the duration of the block; yield its base URL and main process id."""
    port = free_port()
    command, env = server_command(kind, port, env)
    log = open(os.devnull, "wb")  # noqa: SIM115  # closed with the server
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(base, process)
        yield base, process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: the server's processes
            process.wait()
        log.close()


def wait_until_up(base: str, process: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited during start-up: {process.args}")
        try:
            if httpx.get(f"{base}/api/v1/openapi.json", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the server did not answer within {timeout:.0f} s: {process.args}")


def server_cpu_seconds(main: int) -> float:
    """CPU seconds (user + system) used so far by process `main` and its children."""
    pids = [str(main)]
    for children in Path(f"/proc/{main}/task").glob("*/children"):
        pids += children.read_text().split()
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------------------------
# Batches, and COPY of the same rows


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


def count_runs(url: str) -> int:
    return execute(url, "SELECT count(*) FROM orchestrator_run")[0][0]


def export_and_empty(url: str) -> tuple[list[str], bytes]:
    """The stored runs' columns (all but id) and rows in COPY's text format; then empty the
    table and its unique claims, so that the same rows can be written back."""
    rows = execute(
        url,
        "SELECT column_name FROM information_schema.columns WHERE table_name = "
        "'orchestrator_run' AND column_name <> 'id' ORDER BY ordinal_position",
    )
    columns = [row[0] for row in rows]
    select = sql.SQL("COPY (SELECT {} FROM orchestrator_run) TO STDOUT").format(
        sql.SQL(", ").join(map(sql.Identifier, columns))
    )
    exported = bytearray()
    with psycopg.connect(url) as conn, conn.cursor().copy(select) as copy:
        for block in copy:
            exported += block
    execute(url, "TRUNCATE orchestrator_run CASCADE", "TRUNCATE orchestrator_runkey")
    return columns, bytes(exported)


def split_lines(data: bytes, parts: int) -> list[bytes]:
    """`data` in `parts` pieces of whole lines (COPY's text format: one row a line)."""
    pieces, start = [], 0
    for i in range(1, parts + 1):
        end = len(data) if i == parts else data.find(b"\n", len(data) * i // parts) + 1
        end = end or len(data)
        pieces.append(data[start:end])
        start = end
    return [p for p in pieces if p]


def copy_rows(url: str, columns: list[str], data: bytes, connections: int) -> float:
    """COPY `data` into the run table over `connections` connections (a share of the lines
    each, each its own transaction); return the seconds until the last one committed."""
    insert = sql.SQL("COPY orchestrator_run ({}) FROM STDIN").format(
        sql.SQL(", ").join(map(sql.Identifier, columns))
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
        threading.Thread(target=write, args=pair) for pair in zip(conns, pieces, strict=True)
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


def batch_lines(env: dict[str, str], secret: str, args: argparse.Namespace) -> list[str]:
    url, n, clients = args.database_url, args.n, args.clients
    workflows = manage(
        env,
        "shell",
        "-c",
        # The benchmark token's own workflows: another's would take act:all (API scopes).
        "from orchestrator.models import ApiToken, Workflow; "
        "token = ApiToken.objects.get(name='benchmark'); "
        "print(','.join(str(Workflow.objects.create(name=f'bench {i}', token=token).pk) "
        "for i in range(5)))",
    )
    bodies = batches(n, 1000, [int(pk) for pk in workflows.splitlines()[-1].split(",")])
    load, probe = os.getloadavg()[0], cpu_probe_ms()
    # A batch holds its process's interpreter while it parses and validates 1,000 runs, then
    # waits on the COPY: processes beyond the cores overlap one batch's Python with another's.
    with server(SHIPPED, env | {"WEB_CONCURRENCY": str(args.batch_processes)}) as (base, _):
        api = n / send_all(base, secret, bodies, clients)
    if count_runs(url) != n:
        raise SystemExit(f"the API stored {count_runs(url)} runs, expected {n}")
    columns, data = export_and_empty(url)
    copy = n / copy_rows(url, columns, data, clients)
    verdict = "met" if api >= BATCH_GOAL else "not met"
    return [
        f"batches: {n:,} runs in batches of 1,000 over {clients} connections, the server as"
        f" shipped with WEB_CONCURRENCY={args.batch_processes} (load average"
        f" {load:.1f}, pure-Python loop {probe:.1f} ms as they began)",
        f"POST /api/v1/runs/batch     {api:>10,.0f} runs/s   goal >= {BATCH_GOAL:,}: {verdict}",
        f"COPY orchestrator_run x{clients}    {copy:>10,.0f} rows/s   (the same rows)",
        f"ratio API / COPY            {api / copy:>10.1%}",
    ]


# ---------------------------------------------------------------------------------------------
# Single reports in open loop


def open_loop(base: str, secret: str, rate: float, seconds: float, tag: str) -> dict:
    """One open-loop run by benchmarks/openloop.py in its own process; its JSON figures."""
    command = [sys.executable, str(ROOT / "benchmarks" / "openloop.py")]
    command += ["--port", str(urlsplit(base).port), "--rate", str(rate)]
    command += ["--duration", str(seconds), "--prefix", tag, "--timeout", str(CLIENT_TIMEOUT)]
    env = {**os.environ, "FAILSIGHT_TOKEN": secret}  # never on a command line (ps)
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 120, env=env)
    if done.returncode:
        raise SystemExit(f"openloop.py failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def one_row(target: tuple[str, int], secret: str, rate: float, seconds: float, tag: str) -> dict:
    base, main = target
    load, probe, ticks = os.getloadavg()[0], cpu_probe_ms(), cpu_ticks()
    cpu = server_cpu_seconds(main)
    row = open_loop(base, secret, rate, seconds, tag)
    row["server_cpu"] = (server_cpu_seconds(main) - cpu) / row["wall_seconds"]
    return row | {"load": load, "probe": probe, "steal": steal_since(ticks)}


def open_loop_rows(
    env: dict[str, str], secret: str, rates: list[float], seconds: float
) -> list[tuple[str, dict, dict]]:
    """(label, shipped row, baseline row) for each rate, then for twice the shipped capacity.
    Both servers run throughout; at each rate the shipped one is measured first, then the
    baseline, each on its own keys (a replayed report costs more than a new one)."""
    rows: list[tuple[str, dict, dict]] = []
    with server(SHIPPED, env) as shipped, server(BASELINE, env) as baseline:
        for target, name in ((shipped, "s"), (baseline, "b")):
            open_loop(target[0], secret, min(rates), min(2.0, seconds), f"warm-{name}")

        def both(rate: float, tag: str) -> tuple[dict, dict]:
            return (
                one_row(shipped, secret, rate, seconds, f"{tag}-s"),
                one_row(baseline, secret, rate, seconds, f"{tag}-b"),
            )

        for i, rate in enumerate(rates):
            rows.append((f"{rate:,.0f}/s", *both(rate, f"r{i}")))
        capacity = max(row[1]["goodput"] for row in rows)
        overload = both(2 * capacity, "overload")
        overload[0]["capacity"] = capacity
        rows.append((f"2 x capacity ({2 * capacity:,.0f}/s)", *overload))
    return rows


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def times(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}x"


def single_lines(rows: list[tuple[str, dict, dict]], shape: serve.Serving) -> list[str]:
    lines = [
        f"single reports over HTTP, open loop ({shape.processes} processes; shipped: granian,"
        f" WEB_THREADS={shape.threads}, WEB_QUEUE_MS={shape.queue_ms}; baseline: gunicorn gthread,"
        f" {shape.threads} threads, plain Django; latency from each request's scheduled time,"
        f" a client timeout counted as {CLIENT_TIMEOUT:g} s; load, steal and the pure-Python"
        " loop's ms as each row began):",
        f"  {'offered':<26}{'server':<10}{'served/s':>9}{'p50':>8}{'p99':>8}{'503s':>7}"
        f"{'timeouts':>9}{'late':>6}{'cpu':>6}{'load':>6}{'steal':>7}{'loop':>6}"
        f"{'served vs base':>16}{'p99 vs base':>13}",
    ]
    for label, s, b in rows:
        for name, r in (("shipped", s), ("baseline", b)):
            ratios = ""
            if r is s:
                ratios = f"{times(s['goodput'], b['goodput']):>16}{times(s['p99'], b['p99']):>13}"
            lines.append(
                f"  {label if r is s else '':<26}{name:<10}{r['goodput']:>9,.0f}"
                f"{ms(r['p50']):>8}{ms(r['p99']):>8}{r['shed']:>7}{r['timeouts']:>9}"
                f"{r['late']:>6}{r['server_cpu']:>6.0%}{r['load']:>6.1f}"
                f"{percent(r['steal']):>7}{r['probe']:>6.1f}{ratios}"
            )
    served = [(label, s) for label, s, _ in rows[:-1] if (s["p99"] or 1e9) <= P99_GOAL_MS]
    best = max(served, key=lambda pair: pair[1]["goodput"], default=None)
    lines.append(
        f"  shipped, most served with p99 <= {P99_GOAL_MS:g} ms: "
        + (f"{best[1]['goodput']:,.0f}/s (offered {best[0]})" if best else "none")
    )
    _, s, b = rows[-1]
    lines.append(
        f"  shipped at twice its capacity ({s['capacity']:,.0f}/s served at best): goodput"
        f" {s['goodput'] / s['capacity']:.0%} of it (goal >= {OVERLOAD_GOODPUT_GOAL:.0%}),"
        f" 503 p99 {ms(s['p99_shed'])} ms, client timeouts {s['timeouts']} (goal 0);"
        f" baseline: {b['goodput'] / s['capacity']:.0%}, client timeouts {b['timeouts']}"
    )
    return lines


# ---------------------------------------------------------------------------------------------


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="runs in batches (100,000)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small and short")
    parser.add_argument("--clients", type=int, default=4, help="batch connections (4)")
    parser.add_argument("--batch-processes", type=int, default=4, help="web processes (4)")
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", DEFAULT_URL))
    parser.add_argument("--rates", default="500,1000,1500,2000", help="single reports/s offered")
    parser.add_argument("--open-seconds", type=float, default=10.0, help="seconds per rate")
    parser.add_argument("--skip-batch", action="store_true", help="single reports only")
    parser.add_argument("--skip-single", action="store_true", help="batches only")
    parser.add_argument(
        "--priced", action="store_true", help="runs report tokens, priced from a price table"
    )
    args = parser.parse_args()
    global PRICED
    PRICED = args.priced
    if args.quick:
        args.n, args.rates, args.open_seconds = 3000, "100,200", 1.0
    if not args.database_url.startswith(("postgres://", "postgresql://")):
        raise SystemExit("the benchmark needs PostgreSQL: set DATABASE_URL or --database-url")
    return args


def main() -> None:
    args = parse_args()
    url = args.database_url
    env = app_env(url)
    print(f"ingest benchmark; load average before: {os.getloadavg()[0]:.1f}", flush=True)
    recreate_database(url)
    try:
        manage(env, "migrate", "--noinput")
        secret = manage(env, "createtoken", "benchmark").splitlines()[-1]
        if args.priced:
            manage(env, "shell", "-c", PRICE_TABLE)
        if not args.skip_batch:
            print("\n".join(batch_lines(env, secret, args)), flush=True)
            execute(url, "TRUNCATE orchestrator_run CASCADE", "TRUNCATE orchestrator_runkey")
        if not args.skip_single:
            with_checkpoint(url)
            rates = [float(rate) for rate in args.rates.split(",")]
            rows = open_loop_rows(env, secret, rates, args.open_seconds)
            print("\n".join(single_lines(rows, serve.from_env())))
    finally:
        recreate_database(url, drop_only=True)


def with_checkpoint(url: str) -> None:
    """Flush what the batches left dirty before single reports are timed (a checkpoint of the
    batches' rows during the open loop doubles its p99). Needs a superuser; skipped without."""
    try:
        execute(url, "CHECKPOINT")
    except psycopg.Error as exc:
        print(f"(no CHECKPOINT before the single reports: {exc})", file=sys.stderr)


if __name__ == "__main__":
    main()
