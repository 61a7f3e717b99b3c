"""How much does classify cost, beside the failure it classifies?

The corpus is the classifier's test corpus, tests/classifier/corpus/, not a copy of it: every
case there runs here against the same local fault servers (tests/classifier/faults.py: an HTTP
and a gRPC server on 127.0.0.1, a refused port, a silent port). For each case:

- failure path: the case's real failing call, from the call to the caught exception: the
  library's request over loopback to the fault server with its own error handling, or the local
  operation (a refused connect, a missing file, a timeout waited out, a validation error). This
  is what an agent has already paid when classify runs. What exists before the call (the
  client, the session, the connection pool, the event loop) is prepared once and not timed; a
  timeout case pays its whole timeout, as the agent does. Wall-clock time, best of --repeat
  runs; a fast local failure is repeated within a run, so that a run lasts about a millisecond.
- classify: `classify(exc)` on the exception that call raised, wall-clock time per call over
  --number calls, best of --repeat runs, each run interleaved with a failure-path run so that a
  burst of load on the shared machine hits both.
- ratio: classify / failure path; the target is a median over the corpus of at most 0.5.

Loopback is the cheapest network a failure can take (a real provider is milliseconds away), so
for network failures these ratios are upper bounds. In-process failures (a raised builtin, a
validation error, a time limit that a task runner raises) cost microseconds, and there classify
costs more than the failure itself: the per-group medians are printed so that the overall
median hides none of them.

Also printed: the machine's load average when the run starts, classifications per second over
the corpus, the throughput on a plain HTTP status error (the corpus's httpx 404), and per
library the corpus's cases and how many classify as the corpus expects. Cases that call a
service of the machine (PostgreSQL, MariaDB, RabbitMQ) are left out, and said so, when it is
not running.

    .venv/bin/python benchmarks/classify.py            # full size
    .venv/bin/python benchmarks/classify.py --quick    # a smoke run: a few cases, a few seconds
    .venv/bin/python benchmarks/classify.py --figures  # per-library figures only, no timing
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from classifier import classify
from tests.classifier import faults
from tests.classifier.corpus import (
    BUILTINS,
    CORPUS,
    LIBRARY,
    SECTIONS,
    WRAPPED,
    Call,
    Case,
    caught,
    service_available,
)

PLAIN_HTTP_STATUS = "httpx: 404 is resource_missing"
GROUPS = (LIBRARY, BUILTINS, WRAPPED)
TARGET_RATIO = 0.5
# A failure-path run repeats a fast failure until it lasts about this long (clock resolution).
RUN_SECONDS = 0.001


class Row(NamedTuple):
    name: str
    group: str
    category: str
    expected: bool  # whether classify said what the corpus expects
    classify_s: float
    path_s: float

    @property
    def ratio(self) -> float:
        return self.classify_s / self.path_s

    @property
    def library(self) -> str:
        """The library a case exercises: the first word of its name ("boto3 S3: ..." -> boto3)."""
        return self.name.partition(":")[0].split(" ")[0]


def quick_cases() -> list[Case]:
    """Return the first case of each corpus section and of each group, and the plain 404."""
    chosen = [cases[0] for cases in SECTIONS.values()]
    chosen += [next(case for case in CORPUS if case.group == group) for group in GROUPS]
    chosen.append(next(case for case in CORPUS if case.name == PLAIN_HTTP_STATUS))
    return list({case.name: case for case in chosen}.values())


def measure(case: Case, env: faults.FaultEnv, number: int, repeat: int) -> Row:
    """Return the case's classify and failure-path costs, interleaved, best of `repeat`."""
    with case.prepare(env) as call:
        start = time.perf_counter()
        exc = caught(call)  # untimed: the first call also opens connections, imports lazily
        first = max(time.perf_counter() - start, 1e-9)
        calls = max(1, min(1000, int(RUN_SECONDS / first)))
        category = classify(exc).category
        cost = path = float("inf")
        for _ in range(repeat):
            cost = min(cost, classify_cost(exc, number))
            path = min(path, failure_path_cost(call, calls))
    return Row(case.name, case.group, category.value, category is case.category, cost, path)


def classify_cost(exc: BaseException, number: int) -> float:
    """Return the seconds one classify(exc) takes, over `number` calls."""
    start = time.perf_counter()
    for _ in range(number):
        classify(exc)
    return (time.perf_counter() - start) / number


def failure_path_cost(call: Call, number: int) -> float:
    """Return the seconds one failing call takes, from the call to the caught exception."""
    start = time.perf_counter()
    for _ in range(number):
        try:
            call()
        except BaseException:
            continue
        raise AssertionError("the failing call did not fail")
    return (time.perf_counter() - start) / number


def print_rows(rows: list[Row]) -> None:
    """Print one line per case."""
    width = max(len(row.name) for row in rows)
    header = (
        f"{'case':<{width}}  {'group':<8} {'category':<17} {'classify µs':>11} "
        f"{'per s':>9} {'fail path µs':>12} {'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        category = row.category if row.expected else f"{row.category}!"
        print(
            f"{row.name:<{width}}  {row.group:<8} {category:<17} {row.classify_s * 1e6:>11.2f} "
            f"{1 / row.classify_s:>9,.0f} {row.path_s * 1e6:>12.1f} {row.ratio:>6.3f}"
        )
    print("-" * len(header))


def classify_once(case: Case, env: faults.FaultEnv) -> Row:
    """Return the case's category, classified once, without timing."""
    category = classify(case.produce(env)).category
    return Row(case.name, case.group, category.value, category is case.category, 0.0, 0.0)


def print_libraries(rows: list[Row]) -> None:
    """Print, per library, the corpus's cases and how many classify as the corpus expects."""
    libraries: dict[str, list[Row]] = {}
    for row in rows:
        libraries.setdefault(row.library, []).append(row)
    width = max(len(name) for name in libraries)
    print(f"{'library':<{width}}  cases  as expected")
    for name, group in libraries.items():
        print(f"{name:<{width}}  {len(group):>5}  {sum(row.expected for row in group):>11}")
    print(f"{'all':<{width}}  {len(rows):>5}  {sum(row.expected for row in rows):>11}")


def print_summary(rows: list[Row], number: int, repeat: int) -> None:
    """Print the corpus figures: throughput, the plain status error, the median ratios."""
    print(
        f"corpus: {len(rows)} cases; classify {number} calls x {repeat} runs, failure path "
        f"best of {repeat} runs; wall clock, runs interleaved, best kept"
    )
    unexpected = [row.name for row in rows if not row.expected]
    if unexpected:
        print(f"categories other than the corpus expects (marked !): {', '.join(unexpected)}")
    print(
        "classifications per second over the corpus: "
        f"{len(rows) / sum(row.classify_s for row in rows):,.0f}"
    )
    plain = [row for row in rows if row.name == PLAIN_HTTP_STATUS]
    if plain:
        print(
            f"plain HTTP status error: {1 / plain[0].classify_s:,.0f} classifications/s "
            f"({PLAIN_HTTP_STATUS})"
        )
    median = statistics.median(row.ratio for row in rows)
    verdict = "met" if median <= TARGET_RATIO else "MISSED"
    target = f"target <= {TARGET_RATIO}: {verdict}"
    print(f"median ratio classify / failure path: {median:.3f} ({target})")
    for group in GROUPS:
        ratios = [row.ratio for row in rows if row.group == group]
        if ratios:
            median = statistics.median(ratios)
            print(f"  median ratio, {group} only ({len(ratios)} cases): {median:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=10_000, help="classify calls per run")
    parser.add_argument("--repeat", type=int, default=5, help="timing runs (best is kept)")
    parser.add_argument("--quick", action="store_true", help="a few cases, tiny N: a smoke run")
    parser.add_argument("--figures", action="store_true", help="per-library figures, no timing")
    args = parser.parse_args(argv)
    number, repeat = (20, 1) if args.quick else (args.number, args.repeat)
    cases = quick_cases() if args.quick else CORPUS
    missing = sorted({case.needs for case in cases if case.needs} - available_services(cases))
    cases = [case for case in cases if case.needs is None or case.needs not in missing]

    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    print(f"load average (1, 5, 15 min) at the start: {load}")
    if missing:
        print(f"left out, not running here: the cases that need {', '.join(missing)}")
    with faults.running() as env:
        if args.figures:
            rows = [classify_once(case, env) for case in cases]
        else:
            rows = [measure(case, env, number, repeat) for case in cases]
    if not args.figures:
        print_rows(rows)
        print_summary(rows, number, repeat)
    print_libraries(rows)
    return 0


def available_services(cases: list[Case]) -> set[str]:
    """Return the services the cases need that are here."""
    return {case.needs for case in cases if case.needs and service_available(case.needs)}


if __name__ == "__main__":
    sys.exit(main())
