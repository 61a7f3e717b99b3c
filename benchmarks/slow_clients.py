"""Slow clients beside real traffic, against the web server as shipped (the Procfile's `web`).

    .venv/bin/python benchmarks/slow_clients.py --database-url postgres://…/failsight_slow

Two phases of the same open-loop load (`openloop.Generator`: --rate single reports a second for
--seconds), each with the probes (`/healthz`, `/readyz`) asked every 0.2 s on a new connection as
a load balancer does:

1. the baseline: the load alone;
2. the same load beside --slow clients trickling a request head and --slow clients trickling a
   body (`Content-Length: 2075`), each one byte a second; a client the server cuts off (header
   timeout, 408) connects again at once, so that as many are there throughout.

Prints one JSON object, then the figures that matter: the reports' p99 with the slow clients over
their p99 without (measured in the same run), the failed reports, and the probes' slowest answer
in each phase; --web-command measures another server instead (docs/benchmarks.md compares them).
The server, its database (created, migrated and dropped here) and its token are this script's;
the broker and cache are the environment's (CELERY_BROKER_URL, CACHE_URL).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

from ingest import recreate_database, server_cpu_seconds
from openloop import Generator, payloads, percentile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.services import Process, app_env, free_port, manage, procfile, web_url

BODY_LENGTH = 2075
PROBE_EVERY = 0.2
PROBE_TIMEOUT = 8.0
WARM_UP = 5.0  # seconds of the load, unmeasured, before the baseline: connections, caches


class SlowClients:
    """`count` connections each sending `head` then one byte of `trickle` a second, forever:
    one the server closes connects again at once. Counts the closes and the statuses seen."""

    def __init__(self, host: str, port: int, count: int, head: bytes, trickle: bytes) -> None:
        self.host, self.port, self.count = host, port, count
        self.head, self.trickle = head, trickle
        self.cut_off = 0
        self.statuses: dict[int, int] = {}
        self.tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self.client()) for _ in range(self.count)]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def client(self) -> None:
        while True:
            try:
                reader, writer = await asyncio.open_connection(self.host, self.port)
            except OSError:
                await asyncio.sleep(1)
                continue
            answer = asyncio.create_task(reader.read(65536))
            try:
                writer.write(self.head)
                for byte in self.trickle:
                    await asyncio.wait([answer], timeout=1.0)
                    if answer.done():
                        break
                    writer.write(bytes([byte]))
                    await writer.drain()
                data = await answer
            except OSError:
                data = b""
            finally:
                answer.cancel()
                writer.close()
            self.cut_off += 1
            if data.startswith(b"HTTP/1.1 "):
                status = int(data[9:12])
                self.statuses[status] = self.statuses.get(status, 0) + 1


async def probe(host: str, port: int, path: str) -> float | None:
    """Milliseconds until the probe's 200, or None (no 200 within PROBE_TIMEOUT)."""
    started = time.perf_counter()
    try:
        async with asyncio.timeout(PROBE_TIMEOUT):
            reader, writer = await asyncio.open_connection(host, port)
            ask = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
            writer.write(ask.encode())
            status = await reader.readline()
            writer.close()
    except (OSError, TimeoutError):
        return None
    return (time.perf_counter() - started) * 1000 if b" 200 " in status else None


async def probing(host: str, port: int, seconds: float) -> dict[str, list[float | None]]:
    answers: dict[str, list[float | None]] = {"/healthz": [], "/readyz": []}
    pending = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for path, seen in answers.items():
            task = asyncio.create_task(probe(host, port, path))
            task.add_done_callback(lambda done, seen=seen: seen.append(done.result()))
            pending.append(task)
        await asyncio.sleep(PROBE_EVERY)
    await asyncio.gather(*pending)
    return answers


async def phase(
    args: argparse.Namespace, host: str, port: int, prefix: str, seconds: float | None = None
) -> dict:
    """One run of the load with the probes; the server's CPU per report served included (CPU
    time, unlike latency, hardly moves with what else the machine runs)."""
    seconds = seconds or args.seconds
    count = int(args.rate * seconds)
    bodies = payloads(host, port, args.token, count, prefix)
    generator = Generator(host, port, bodies, args.timeout, args.max_connections)
    await generator.warm(32)
    probes = asyncio.create_task(probing(host, port, seconds))
    cpu = server_cpu_seconds(args.server_pid)
    await generator.run(args.rate, seconds)
    cpu = server_cpu_seconds(args.server_pid) - cpu
    tally = generator.tally
    answers = await probes
    everything = tally.latencies + [args.timeout * 1000] * tally.timeouts
    failed = count - len(tally.ok)
    return {
        "sent": count,
        "ok": len(tally.ok),
        "failed": failed,
        "shed": len(tally.shed),
        "other": tally.other,
        "timeouts": tally.timeouts,
        "broken": tally.broken,
        "late": tally.late,
        "p50": percentile(everything, 0.50),
        "p99": percentile(everything, 0.99),
        "server_cpu_ms_per_report": 1000 * cpu / max(1, len(tally.ok)),
        "probes": {
            path: {
                "asked": len(seen),
                "unanswered": sum(ms is None for ms in seen),
                "max_ms": max((ms for ms in seen if ms is not None), default=None),
            }
            for path, seen in answers.items()
        },
    }


async def measure(args: argparse.Namespace, url: str) -> dict:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    await phase(args, host, port, f"warm-{time.time_ns()}", seconds=WARM_UP)
    baseline = await phase(args, host, port, f"base-{time.time_ns()}")
    head = f"POST /api/v1/runs HTTP/1.1\r\nHost: {host}\r\n".encode()
    headers = SlowClients(host, port, args.slow, head, b"X-Slow: " + b"s" * 4096)
    body_head = (
        head
        + (
            f"Authorization: Bearer {args.token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {BODY_LENGTH}\r\n\r\n"
        ).encode()
    )
    bodies = SlowClients(host, port, args.slow, body_head, b" " * BODY_LENGTH)
    headers.start()
    bodies.start()
    await asyncio.sleep(2)  # every slow client connected and trickling
    slowed = await phase(args, host, port, f"slow-{time.time_ns()}")
    await headers.stop()
    await bodies.stop()
    return {
        "rate": args.rate,
        "seconds": args.seconds,
        "slow_clients": 2 * args.slow,
        "baseline": baseline,
        "with_slow_clients": slowed,
        "slow_heads_cut_off": headers.cut_off,
        "slow_bodies_cut_off": bodies.cut_off,
        "slow_body_statuses": bodies.statuses,
        "p99_ratio": slowed["p99"] / baseline["p99"],
        "load_average": os.getloadavg(),
    }


def report(result: dict) -> None:
    print(json.dumps(result))
    for name in ("baseline", "with_slow_clients"):
        figures = result[name]
        probes = ", ".join(
            f"{path} slowest {p['max_ms'] and round(p['max_ms'])} ms, {p['unanswered']} unanswered"
            for path, p in figures["probes"].items()
        )
        print(
            f"{name}: {figures['ok']}/{figures['sent']} reports ok, {figures['failed']} failed,"
            f" p99 {figures['p99']:.1f} ms, server CPU {figures['server_cpu_ms_per_report']:.2f} ms"
            f" a report; {probes}"
        )
    print(f"p99 with {result['slow_clients']} slow clients / without: {result['p99_ratio']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--rate", type=float, default=200.0, help="reports a second")
    parser.add_argument("--seconds", type=float, default=60.0, help="of each phase")
    parser.add_argument("--slow", type=int, default=200, help="slow clients of each kind")
    parser.add_argument("--timeout", type=float, default=5.0, help="a report's client timeout")
    parser.add_argument("--max-connections", type=int, default=256)
    parser.add_argument(
        "--web-command",
        default=procfile()["web"],
        help="the server to measure (default: the Procfile's web line; it reads BIND)",
    )
    args = parser.parse_args()
    var = Path(tempfile.mkdtemp(prefix="failsight-slow-"))
    broker = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
    cache = os.environ.get("CACHE_URL", "redis://127.0.0.1:6379/1")
    # No per-token rate limit: the load is one token's, well past the default 6,000 a minute.
    env = app_env(args.database_url, broker, cache, var) | {
        "WEB_ACCESS_LOG": "0",
        "API_RATE_LIMIT_PER_MINUTE": "0",
    }
    recreate_database(args.database_url)
    try:
        manage(env, "migrate", "--noinput")
        args.token = manage(env, "createtoken", "slow-bench").splitlines()[-1]
        port = free_port()
        env["BIND"] = f"127.0.0.1:{port}"
        server = Process("web", args.web_command, env, var / "web.log").start()
        url = web_url(server, port)
        args.server_pid = server.proc.pid
        try:
            report(asyncio.run(measure(args, url)))
        finally:
            server.stop()
    finally:
        recreate_database(args.database_url, drop_only=True)


if __name__ == "__main__":
    main()
