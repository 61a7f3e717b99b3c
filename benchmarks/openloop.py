"""An open-loop HTTP load generator: requests leave on a fixed schedule, whatever the answers.

    FAILSIGHT_TOKEN=fs_… .venv/bin/python benchmarks/openloop.py --port 8000 --rate 1000

A closed-loop client (each connection waits for its answer before sending again) slows down with
the server and hides its queueing: it never offers more than the server serves. Here request i
leaves at start + i / rate on an idle keep-alive connection, or on a new one when all are busy
(up to --max-connections; beyond, it waits for the next free one, as a client's pool would),
and its latency runs from that scheduled instant (so a late send counts against the server's
figures, not in its favour). A request unanswered after --timeout seconds is given up: its
connection is closed, as a real client's would be, and it counts as a timeout. Requests the
generator itself sent more than LATE_MS after their time are counted as `late`: a non-zero count
means the generator, not the server, was the limit.

It is lean on purpose (asyncio protocols over raw sockets, pre-encoded requests, a status line
and Content-Length parser) so that it takes little of the CPU it shares with the server; it
reports the CPU time it used. The bodies are single run reports (`ingest.make_run`), each with
its own Idempotency-Key. Prints one JSON object: the counts and latency percentiles.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import resource
import time
from collections import deque
from dataclasses import dataclass, field

from ingest import make_run

LATE_MS = 5.0
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)


@dataclass
class Tally:
    """What happened to the requests of one run."""

    latencies: list[float] = field(default_factory=list)  # ms, every answered request
    ok: list[float] = field(default_factory=list)  # ms, 2xx answers
    shed: list[float] = field(default_factory=list)  # ms, 503 answers
    other: dict[int, int] = field(default_factory=dict)  # other statuses: count
    timeouts: int = 0
    broken: int = 0  # connection errors
    late: int = 0
    connections: int = 0


class Connection(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    def __init__(self, generator: Generator) -> None:
        self.generator = generator
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.due: float | None = None  # the scheduled time of the request in flight

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, payload: bytes, due: float) -> None:
        self.due = due
        self.transport.write(payload)  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        match = _CONTENT_LENGTH.search(self.buffer, 0, end + 2)
        length = int(match.group(1)) if match else 0
        if len(self.buffer) < end + 4 + length:
            return
        status = int(self.buffer[9:12])
        del self.buffer[: end + 4 + length]
        due, self.due = self.due, None
        if due is not None:
            self.generator.answered(self, status, due)

    def connection_lost(self, exc: Exception | None) -> None:
        self.generator.lost(self)


class Generator:
    def __init__(
        self, host: str, port: int, payloads: list[bytes], timeout: float, limit: int
    ) -> None:
        self.host, self.port = host, port
        self.payloads = payloads
        self.timeout = timeout
        self.limit = limit  # most connections open at once
        self.opening = 0
        self.idle: list[Connection] = []
        self.busy: set[Connection] = set()
        # Requests due while every connection was busy and none could be opened, oldest first:
        # they leave on the next free connection (their latency still runs from their due time).
        self.waiting: deque[tuple[int, float]] = deque()
        self.tally = Tally()
        self.loop = asyncio.get_running_loop()

    async def connect(self) -> Connection:
        _, conn = await self.loop.create_connection(lambda: Connection(self), self.host, self.port)
        self.tally.connections += 1
        return conn

    async def warm(self, count: int) -> None:
        self.idle = list(await asyncio.gather(*(self.connect() for _ in range(count))))

    def answered(self, conn: Connection, status: int, due: float) -> None:
        ms = (self.loop.time() - due) * 1000
        self.tally.latencies.append(ms)
        if 200 <= status < 300:
            self.tally.ok.append(ms)
        elif status == 503:
            self.tally.shed.append(ms)
        else:
            self.tally.other[status] = self.tally.other.get(status, 0) + 1
        self.busy.discard(conn)
        self.idle.append(conn)
        if self.waiting:
            self.send(*self.waiting.popleft())

    def lost(self, conn: Connection) -> None:
        self.busy.discard(conn)
        if conn in self.idle:
            self.idle.remove(conn)
        if conn.due is not None:  # closed by the server with a request in flight
            conn.due = None
            self.tally.broken += 1

    def send(self, index: int, due: float) -> None:
        payload = self.payloads[index % len(self.payloads)]
        if self.idle:
            conn = self.idle.pop()
            self.busy.add(conn)
            conn.send(payload, due)
        elif len(self.busy) + self.opening < self.limit:
            self.opening += 1
            self.loop.create_task(self._send_on_new(payload, due))
        else:
            self.waiting.append((index, due))

    async def _send_on_new(self, payload: bytes, due: float) -> None:
        try:
            conn = await self.connect()
        except OSError:
            self.tally.broken += 1
            return
        finally:
            self.opening -= 1
        self.busy.add(conn)
        conn.send(payload, due)

    def give_up_late(self) -> None:
        """Close the connections whose request waited past the timeout (the client gives up)."""
        now = self.loop.time()
        for conn in [c for c in self.busy if c.due is not None and now - c.due > self.timeout]:
            conn.due = None
            self.tally.timeouts += 1
            self.busy.discard(conn)
            conn.transport.close()  # type: ignore[union-attr]
        while self.waiting and now - self.waiting[0][1] > self.timeout:
            self.waiting.popleft()  # never sent: its client gave up waiting for a connection
            self.tally.timeouts += 1

    async def run(self, rate: float, duration: float) -> None:
        total = int(rate * duration)
        start = self.loop.time() + 0.05
        index = 0
        next_sweep = start
        while index < total:
            now = self.loop.time()
            while index < total and start + index / rate <= now:
                if (now - start - index / rate) * 1000 > LATE_MS:
                    self.tally.late += 1  # the generator itself fell behind its schedule
                self.send(index, start + index / rate)
                index += 1
            if now >= next_sweep:
                self.give_up_late()
                next_sweep = now + 0.01
            if index < total:
                await asyncio.sleep(max(0.0, start + index / rate - self.loop.time()))
        deadline = self.loop.time() + self.timeout + 0.5
        while (self.busy or self.waiting) and self.loop.time() < deadline:
            await asyncio.sleep(0.01)
            self.give_up_late()


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def request_bytes(host: str, port: int, token: str, body: bytes, key: str) -> bytes:
    head = (
        f"POST /api/v1/runs HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Authorization: Bearer {token}\r\nIdempotency-Key: {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def payloads(host: str, port: int, token: str, count: int, prefix: str) -> list[bytes]:
    rng = random.Random(prefix)
    out = []
    for i in range(count):
        run = make_run(rng, i, [])
        key = run.pop("idempotency_key") + f"-{prefix}"
        out.append(request_bytes(host, port, token, json.dumps(run).encode(), key))
    return out


async def measure(args: argparse.Namespace) -> dict:
    count = int(args.rate * args.duration)
    bodies = payloads(args.host, args.port, args.token, count, args.prefix)
    generator = Generator(args.host, args.port, bodies, args.timeout, args.max_connections)
    await generator.warm(args.connections)
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    await generator.run(args.rate, args.duration)
    wall = time.perf_counter() - started
    used = resource.getrusage(resource.RUSAGE_SELF)
    tally = generator.tally
    timed_out = [args.timeout * 1000] * tally.timeouts  # a timeout counts as the timeout
    everything = tally.latencies + timed_out
    return {
        "offered": args.rate,
        "sent": count,
        "seconds": args.duration,
        "ok": len(tally.ok),
        "shed": len(tally.shed),
        "other": tally.other,
        "timeouts": tally.timeouts,
        "broken": tally.broken,
        "late": tally.late,
        "connections": tally.connections,
        "goodput": len(tally.ok) / args.duration,
        "p50": percentile(everything, 0.50),
        "p95": percentile(everything, 0.95),
        "p99": percentile(everything, 0.99),
        "p99_ok": percentile(tally.ok, 0.99),
        "p99_shed": percentile(tally.shed, 0.99),
        "cpu_seconds": (used.ru_utime + used.ru_stime) - (cpu.ru_utime + cpu.ru_stime),
        "wall_seconds": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--rate", type=float, required=True, help="requests per second offered")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of sending")
    parser.add_argument("--timeout", type=float, default=2.0, help="client timeout (s)")
    parser.add_argument("--connections", type=int, default=32, help="opened before the start")
    # Below gunicorn's worker_connections (1,000 per process): past it a gthread worker stops
    # polling its connections altogether until one closes.
    parser.add_argument("--max-connections", type=int, default=512, help="most open at once")
    parser.add_argument("--prefix", default=str(time.time_ns()), help="idempotency key suffix")
    args = parser.parse_args()
    # The bearer secret comes by environment, as failsight-mcp takes it: a command line is
    # readable by every user of the machine (ps).
    args.token = os.environ.get("FAILSIGHT_TOKEN", "")
    if not args.token:
        parser.error("set FAILSIGHT_TOKEN to the API token's secret")
    print(json.dumps(asyncio.run(measure(args))))


if __name__ == "__main__":
    main()
