"""What does `AgentClient.track()` cost the agent's own thread, beside a bare function call?

    .venv/bin/python benchmarks/client.py              # 20,000 tracked calls
    .venv/bin/python benchmarks/client.py --quick      # a smoke run: a few seconds
    FAILSIGHT_TOKEN=fs_… .venv/bin/python benchmarks/client.py --url http://127.0.0.1:8000

The agent's step is a function that returns its results. Measured in the same run, interleaved
in blocks so that a burst of load on the shared machine hits both:

- bare: the step called directly;
- track: the same step inside `with client.track(...) as call:` on a background client (the
  default), wall-clock time of the whole `with` block per call, in the agent's thread, while the
  reporting thread really sends the batches over HTTP on loopback (so its share of the GIL is in
  the figure);
- track, failure: the step raises a real `ConnectionRefusedError` (raised once, kept), which track
  classifies and queues (reraise=False): the failure path's classification is in the agent's
  thread by design, since the agent gets the envelope back at once;
- strict: a few hundred calls of `strict=True` (one synchronous HTTP report each), for scale.

Goal: the median of `track` at most 50 µs. Printed: the load average at the start, median / p90 /
p99 per call of each, the ratio track / bare, and how the reporting thread kept up (runs stored,
lost, how long the final flush took).

By default the batches go to a stand-in server started here (a stdlib HTTP server in another
process answering `POST /runs/batch` with one "created" per run, and `GET /policies`): what the
server does with them is measured by benchmarks/ingest.py, and takes no time from the agent's
process. `--url` sends them to a real Failsight server instead, with the API token's secret taken
from the FAILSIGHT_TOKEN environment variable (a command line is readable by every user: ps).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from orchestrator.client import AgentClient

GOAL_US = 50.0
BLOCK = 500  # calls per interleaved block

STAND_IN = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes
    def _answer(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Policy-Version", "1")
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self._answer({"version": 1, "policies": [], "overrides": []})
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if not self.path.endswith("/batch"):  # POST /runs: one run, answered as stored
            return self._answer(dict(body, id=1))
        created = {"status": "created", "id": 1, "error": None}
        self._answer({"results": [dict(created, index=i) for i in range(len(body["runs"]))]})
    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@contextmanager
def stand_in_server() -> Iterator[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", STAND_IN], stdout=subprocess.PIPE, text=True, bufsize=1
    )
    try:
        port = int(proc.stdout.readline())
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return statistics.median(ordered), at(0.9), at(0.99)


def step(i: int) -> list[int]:
    """The agent's own work: here, nothing but returning its results."""
    return [i]


def timed(call: Callable[[int], object], start: int, count: int) -> list[float]:
    samples = []
    clock = time.perf_counter_ns
    for i in range(start, start + count):
        t0 = clock()
        call(i)
        samples.append((clock() - t0) / 1000)
    return samples


def tracker(client: AgentClient, fail: bool) -> Callable[[int], object]:
    refused = ConnectionRefusedError(111, "Connection refused")
    attempted = {"query": "AI impact on film"}

    def tracked(i: int) -> None:
        with client.track("bench-agent", "web_search", "search", attempted, reraise=False) as c:
            if fail:
                raise refused
            c.results = step(i)

    return tracked


def measure(url: str, token: str, calls: int, strict_calls: int) -> dict:
    with tempfile.TemporaryDirectory() as spool_dir:
        spool = Path(spool_dir) / "spool.jsonl"
        client = AgentClient(url, token, spool_path=spool, queue_size=calls * 2 + 10)
        client.flush(30)  # the thread is up and has fetched the policies
        warm = BLOCK
        timed(tracker(client, False), 0, warm)
        timed(step, 0, warm)
        client.flush(30)
        bare: list[float] = []
        track: list[float] = []
        failing: list[float] = []
        for start in range(0, calls, BLOCK):
            bare += timed(step, start, BLOCK)
            track += timed(tracker(client, False), start, BLOCK)
            failing += timed(tracker(client, True), start, BLOCK // 5)
        flush_started = time.perf_counter()
        flushed = client.flush(120)
        flush_s = time.perf_counter() - flush_started
        client.close()
        stats = client.stats
    with AgentClient(url, token, strict=True) as sync:
        strict = timed(tracker(sync, False), 0, strict_calls)
    return {
        "bare": bare,
        "track": track,
        "failing": failing,
        "strict": strict,
        "stats": stats,
        "flushed": flushed,
        "flush_s": flush_s,
        "expected": warm + len(track) + len(failing),
    }


def report(m: dict) -> str:
    lines = [f"{'':22}{'median µs':>10}{'p90 µs':>10}{'p99 µs':>10}{'calls':>8}"]
    names = {
        "bare": "bare function call",
        "track": "track (background)",
        "failing": "track, failure",
        "strict": "track (strict=True)",
    }
    medians = {}
    for key, label in names.items():
        med, p90, p99 = percentiles(m[key])
        medians[key] = med
        lines.append(f"{label:22}{med:10.2f}{p90:10.2f}{p99:10.2f}{len(m[key]):8}")
    ratio = medians["track"] / medians["bare"]
    verdict = "meets" if medians["track"] <= GOAL_US else "MISSES"
    lines.append(f"ratio track / bare call (medians): {ratio:.0f}x")
    lines.append(
        f"median track() in the agent's thread: {medians['track']:.2f} µs "
        f"({verdict} the goal of {GOAL_US:.0f} µs)"
    )
    lines.append(
        f"ratio strict / background (medians): {medians['strict'] / medians['track']:.0f}x"
    )
    s = m["stats"]
    lines.append(
        f"reporting thread: {s.stored} of {m['expected']} runs stored, {s.lost} lost, "
        f"{s.spooled} spooled; final flush {'done' if m['flushed'] else 'TIMED OUT'} "
        f"in {m['flush_s'] * 1000:.0f} ms"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--strict-calls", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="2,000 calls, 50 strict")
    parser.add_argument("--url", help="a real Failsight server (default: a stand-in)")
    args = parser.parse_args(argv)
    # The stand-in accepts any bearer; a real server needs its token's secret, by environment.
    token = os.environ.get("FAILSIGHT_TOKEN", "fs_bench" if not args.url else "")
    if not token:
        parser.error("set FAILSIGHT_TOKEN to the API token's secret for --url")
    calls, strict_calls = (2_000, 50) if args.quick else (args.calls, args.strict_calls)
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"load average (1, 5, 15 min) at the start: {load}")
    if args.url:
        print(f"server: {args.url}")
        m = measure(args.url, token, calls, strict_calls)
    else:
        with stand_in_server() as url:
            print(f"server: a stand-in answering POST /runs/batch at {url}")
            m = measure(url, token, calls, strict_calls)
    print(report(m))
    print(json.dumps({"track_median_us": round(percentiles(m["track"])[0], 3)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
