"""Releases compared, not guessed: this tree against a git ref, alternately, on one machine.

    .venv/bin/python benchmarks/compare.py REF [--rounds 4] [--singles 400] [--batches 4]
        [--open-rate 1000] [--open-seconds 8] [--quick] [--database-url postgres://…]

REF (a commit, tag or branch) is checked out with `git worktree add --detach` into a temporary
directory, removed at the end. Each tree runs in its own processes, from its own directory with
PYTHONPATH set to it (the same venv), against its own database, migrated by that tree. Figures:

- single-report CPU in process: the milliseconds of CPU one `POST /api/v1/runs` of the ingest
  benchmark's payload (`ingest.make_run`) costs through Django's test client, middleware
  included, after a warm-up, in a process that has loaded the tree's served app (`config.wsgi`)
  as its server's workers do: what that does to the heap (this tree freezes it, `settle_heap`)
  counts as it does when served;
- batches: runs per second through `POST /api/v1/runs/batch` in process (1,000-run batches);
- open loop (unless `--open-rate 0`): each tree's server as shipped (`config.serve`) offered
  `--open-rate` single reports per second by `benchmarks/openloop.py`: served per second and p99.

Rounds alternate which tree goes first (A B, then B A …), so that a machine growing busier or
quieter weighs on both alike; each figure is the median of its rounds. Printed: both medians and
their ratio (this / REF), the goals, and the load average as each round began.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ingest import (
    DEFAULT_URL,
    P99_GOAL_MS,
    app_env,
    free_port,
    open_loop,
    recreate_database,
    wait_until_up,
    with_database,
)

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"

SINGLE_CPU_GOAL_MS = 0.8
BATCH_GOAL = 20_000  # runs/s through the batch API, on a quiet machine

# Run in each tree's own interpreter: the figures of one round, as one JSON line.
PROBE = r"""
import json, os, random, sys, time
import django
django.setup()
import config.wsgi  # each tree's served app, loaded as its server loads it (heap settled or not)
from django.test import Client
sys.path.insert(0, os.environ["BENCH_DIR"])
from ingest import make_run

tag = os.environ["BENCH_TAG"]
singles, batches = int(os.environ["BENCH_SINGLES"]), int(os.environ["BENCH_BATCHES"])
client = Client(HTTP_AUTHORIZATION="Bearer " + os.environ["FAILSIGHT_TOKEN"])
rng = random.Random(7)

def run(i):
    return make_run(rng, i, []) | {"idempotency_key": f"{tag}-{i}"}

def post(path, body, expected):
    response = client.post(path, data=body, content_type="application/json")
    if response.status_code != expected:
        raise SystemExit(f"{path}: {response.status_code} {response.content[:300]!r}")

warm = [json.dumps(run(i)) for i in range(50)]
bodies = [json.dumps(run(i)) for i in range(50, 50 + singles)]
for body in warm:
    post("/api/v1/runs", body, 201)
cpu = time.process_time()
for body in bodies:
    post("/api/v1/runs", body, 201)
single_ms = (time.process_time() - cpu) * 1000 / singles

size = 1000
start = 50 + singles
chunks = [
    json.dumps({"runs": [run(start + b * size + i) for i in range(size)]})
    for b in range(batches + 1)
]
post("/api/v1/runs/batch", chunks[0], 200)  # warm-up
wall = time.perf_counter()
for body in chunks[1:]:
    post("/api/v1/runs/batch", body, 200)
batch_per_s = batches * size / (time.perf_counter() - wall)
print(json.dumps({"single_cpu_ms": single_ms, "batch_runs_per_s": batch_per_s}))
"""


def tree_env(tree: Path, url: str) -> dict[str, str]:
    return app_env(url) | {
        "PYTHONPATH": str(tree),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "ALLOWED_HOSTS": "127.0.0.1,testserver",
        "BENCH_DIR": str(BENCHMARKS),  # this tree's payload for both
    }


def run_in(tree: Path, env: dict[str, str], *args: str, timeout: float = 600) -> str:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"{tree}: {' '.join(args[:2])} failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip()


@contextmanager
def worktree(ref: str) -> Iterator[Path]:
    """`ref` checked out in a temporary directory for the duration of the block."""
    with tempfile.TemporaryDirectory(prefix="failsight-compare-") as parent:
        path = Path(parent) / "ref"
        git = ["git", "-C", str(ROOT), "worktree"]
        subprocess.run([*git, "add", "--detach", str(path), ref], check=True, capture_output=True)
        try:
            yield path
        finally:
            subprocess.run([*git, "remove", "--force", str(path)], check=False, capture_output=True)


@contextmanager
def shipped_server(tree: Path, env: dict[str, str]) -> Iterator[str]:
    """The tree's server as shipped (`python -m config.serve`); yields its base URL."""
    port = free_port()
    log = open(os.devnull, "wb")  # noqa: SIM115  # closed with the server
    process = subprocess.Popen(
        [sys.executable, "-m", "config.serve"],
        cwd=tree,
        env=env | {"BIND": f"127.0.0.1:{port}"},
        stdout=log,
        stderr=log,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(base, process)
        yield base
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: the server's processes
            process.wait()
        log.close()


def one_round(tree: Path, env: dict[str, str], tag: str, args: argparse.Namespace) -> dict:
    probe_env = env | {
        "BENCH_TAG": tag,
        "BENCH_SINGLES": str(args.singles),
        "BENCH_BATCHES": str(args.batches),
    }
    figures = json.loads(run_in(tree, probe_env, "-c", PROBE).splitlines()[-1])
    if args.open_rate > 0:
        with shipped_server(tree, env) as base:
            row = open_loop(base, env["FAILSIGHT_TOKEN"], args.open_rate, args.open_seconds, tag)
        figures |= {"open_served_per_s": row["goodput"], "open_p99_ms": row["p99"]}
    return figures


def prepare(tree: Path, url: str) -> dict[str, str]:
    """A fresh database for `tree`, migrated by it, and a token; the tree's environment."""
    recreate_database(url)
    env = tree_env(tree, url)
    run_in(tree, env, "manage.py", "migrate", "--noinput")
    secret = run_in(tree, env, "manage.py", "createtoken", "compare").splitlines()[-1]
    return env | {"FAILSIGHT_TOKEN": secret}  # never on a command line (ps)


FIGURES = (
    # name, label, unit, lower is better
    ("single_cpu_ms", "single report, CPU in process", "ms", True),
    ("batch_runs_per_s", "batches of 1,000, in process", "runs/s", False),
    ("open_served_per_s", "open loop, served", "/s", False),
    ("open_p99_ms", "open loop, p99", "ms", True),
)


def report(ref: str, rounds: dict[str, list[dict]], loads: list[float], args: argparse.Namespace):
    lines = [
        f"this tree against {ref}, {len(loads)} rounds alternated (load average as each began:"
        f" {', '.join(f'{load:.1f}' for load in loads)}); medians, and this / {ref}:",
    ]
    for name, label, unit, _ in FIGURES:
        ours = [r[name] for r in rounds["this"] if r.get(name) is not None]
        theirs = [r[name] for r in rounds["ref"] if r.get(name) is not None]
        if not ours or not theirs:
            continue
        a, b = statistics.median(ours), statistics.median(theirs)
        lines.append(
            f"  {label:<34}{a:>10,.2f} {unit:<7}{b:>10,.2f} {unit:<7}{a / b:>6.2f}x"
            + (f"  (offered {args.open_rate:g}/s)" if name.startswith("open") else "")
        )
    single = statistics.median(r["single_cpu_ms"] for r in rounds["this"])
    batch = statistics.median(r["batch_runs_per_s"] for r in rounds["this"])
    lines.append(
        f"goals: single-report CPU <= {SINGLE_CPU_GOAL_MS} ms ({single:.2f}); batches >= 1.0x"
        f" {ref} and >= {BATCH_GOAL:,} runs/s on a quiet machine ({batch:,.0f}); open loop"
        f" served >= {ref}'s with p99 <= {P99_GOAL_MS:g} ms at 1,000/s"
    )
    return lines


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ref", help="the git ref to compare against (e.g. 0b04105)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per tree (4)")
    parser.add_argument("--singles", type=int, default=400, help="single reports a round (400)")
    parser.add_argument("--batches", type=int, default=4, help="1,000-run batches a round (4)")
    parser.add_argument("--open-rate", type=float, default=1000, help="0: no open loop (1000)")
    parser.add_argument("--open-seconds", type=float, default=8.0, help="seconds (8)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small and short")
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL", DEFAULT_URL))
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.singles, args.batches = 1, 30, 1
        args.open_rate, args.open_seconds = min(args.open_rate, 50), 2.0
    return args


def main() -> None:
    args = parse_args()
    base = args.database_url.rsplit("/", 1)[1]
    urls = {
        "this": with_database(args.database_url, f"{base}_this"),
        "ref": with_database(args.database_url, f"{base}_ref"),
    }
    with worktree(args.ref) as ref_tree:
        trees = {"this": ROOT, "ref": ref_tree}
        try:
            envs = {side: prepare(trees[side], urls[side]) for side in trees}
            rounds: dict[str, list[dict]] = {"this": [], "ref": []}
            loads = []
            for i in range(args.rounds):
                loads.append(os.getloadavg()[0])
                order = ("this", "ref") if i % 2 == 0 else ("ref", "this")
                for side in order:
                    tag = f"r{i}-{time.monotonic_ns()}"
                    rounds[side].append(one_round(trees[side], envs[side], tag, args))
            print("\n".join(report(args.ref, rounds, loads, args)), flush=True)
        finally:
            for url in urls.values():
                recreate_database(url, drop_only=True)


if __name__ == "__main__":
    main()
