"""Ingest benchmark: N runs through POST /api/v1/runs/batch, end to end, beside psycopg's COPY.

    .venv/bin/python benchmarks/ingest.py [--n 100000] [--quick] [--database-url postgres://…]

Against PostgreSQL (DATABASE_URL, default postgres://postgres@127.0.0.1:5432/failsight_bench):
recreates that database, migrates it, creates a token, starts the real app server (gunicorn,
DEBUG off) on a free port, and sends the runs in batches of 1,000 over HTTP with httpx: auth,
rate limit, JSON parsing, validation, idempotency keys, one INSERT … ON CONFLICT per batch. It then
exports the stored rows, truncates the table and writes the very same rows back with COPY: the
physical limit of the same table with the same indexes. Prints both rates and their ratio.
The database is dropped and the server stopped at the end, whatever happens.
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
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
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


@contextmanager
def server(env: dict[str, str], workers: int) -> Iterator[str]:
    """Run gunicorn for the duration of the block; yield its base URL."""
    port = free_port()
    command = [sys.executable, "-m", "gunicorn", "config.wsgi", "-w", str(workers)]
    command += ["-b", f"127.0.0.1:{port}", "--timeout", "120", "--log-level", "warning"]
    process = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
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


def wait_until_up(base: str, process: subprocess.Popen, timeout: float = 30) -> None:
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
    raise SystemExit("gunicorn did not answer within 30 s")


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


def copy_same_rows(url: str, expected: int) -> float:
    """Export the stored runs, truncate, COPY them back; return the seconds the COPY took."""
    with psycopg.connect(url) as conn:
        columns = [
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = 'orchestrator_run' AND column_name <> 'id' "
                "ORDER BY ordinal_position"
            )
        ]
        column_list = sql.SQL(", ").join(map(sql.Identifier, columns))
        exported = bytearray()
        select = sql.SQL("COPY (SELECT {} FROM orchestrator_run) TO STDOUT").format(column_list)
        with conn.cursor().copy(select) as copy:
            for block in copy:
                exported += block
        conn.execute("TRUNCATE orchestrator_run CASCADE")
        conn.commit()

        started = time.perf_counter()
        insert = sql.SQL("COPY orchestrator_run ({}) FROM STDIN").format(column_list)
        with conn.cursor().copy(insert) as copy:
            for offset in range(0, len(exported), 1 << 20):
                copy.write(exported[offset : offset + (1 << 20)])
        conn.commit()
        elapsed = time.perf_counter() - started
        count = conn.execute("SELECT count(*) FROM orchestrator_run").fetchone()[0]
    if count != expected:
        raise SystemExit(f"COPY wrote {count} rows, expected {expected}")
    return elapsed


def count_runs(url: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT count(*) FROM orchestrator_run").fetchone()[0]


def report(api: Rate, copy: Rate) -> str:
    lines = [
        f"{'path':<28} {'rows':>9} {'seconds':>9} {'rows/s':>10}",
        *(
            f"{r.label:<28} {r.rows:>9,} {r.seconds:>9.2f} {r.per_second:>10,.0f}"
            for r in (api, copy)
        ),
        f"{'ratio API / COPY':<28} {'':>9} {'':>9} {api.per_second / copy.per_second:>10.1%}",
    ]
    return "\n".join(lines)


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
    return parser.parse_args()


def main() -> None:
    args = parse_args()
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
        bodies = batches(n, args.batch, workflow_ids)
        with server(env, args.workers) as base:
            api_seconds = send_all(base, secret, bodies, args.clients)
        stored = count_runs(url)
        if stored != n:
            raise SystemExit(f"the API stored {stored} runs, expected {n}")
        copy_seconds = copy_same_rows(url, n)
    finally:
        recreate_database(url, drop_only=True)
    print(
        f"ingest benchmark: {n:,} runs, batches of {args.batch}, "
        f"{args.workers} gunicorn workers, {args.clients} client connections, "
        f"load average before: {load_before:.1f}"
    )
    print(
        report(
            Rate("POST /api/v1/runs/batch", n, api_seconds),
            Rate("COPY orchestrator_run", n, copy_seconds),
        )
    )


if __name__ == "__main__":
    main()
