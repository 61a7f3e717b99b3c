"""What does scrubbing cost on the ingest path, against the previous release's scrubber?

The payload is a 1,000-run batch in the mix of benchmarks/ingest.py (70 % successes with 0-5
results, 30 % failures with partial results, a detail and alternatives), one run in 50 carrying a
secret form of the test corpus (tests/classifier/shapes_corpus.py). Each run is scrubbed as the
server does it (`EnvelopeIn.scrub`: the envelope's fields in one look, then the identity fields)
by three scrubbers on the same payload, interleaved, best of --repeat rounds:

- baseline: the previous release's `classifier/scrub.py`, read from git (--baseline, a commit),
- server: this release's scrubber under RE2 (`orchestrator.patterns.compile_re2`),
- client: this release's scrubber under Python's `re` (what the SDK runs).

Printed: the load average at the start, ms per 1,000-run batch for each and the ratios to the
baseline, then the same over the whole secret corpus (every form once, as text).

    .venv/bin/python benchmarks/scrub.py            # 1,000 runs, best of 7
    .venv/bin/python benchmarks/scrub.py --quick    # 200 runs, best of 2
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from classifier.scrub import ENVELOPE_FIELDS, IDENTITY_FIELDS, Scrubber  # noqa: E402
from orchestrator.patterns import compile_re2  # noqa: E402
from tests.classifier import shapes_corpus  # noqa: E402

# The commit before secrets were read in any shape: its scrubber is the baseline.
BASELINE = "c2e2693"
SOURCES = ("web_search", "news_api", "scholar_api", "internal_db")
TOPICS = ("film", "music", "games", "books")


def make_run(rng: random.Random, i: int, secrets: list[str]) -> dict[str, Any]:
    run: dict[str, Any] = {
        "agent": f"agent-{i % 7}",
        "source": rng.choice(SOURCES),
        "topic": rng.choice(TOPICS),
        "attempted": {"operation": "search", "query": f"AI impact on {rng.choice(TOPICS)} {i}"},
        "operation": "search",
    }
    results = [
        {"url": f"https://example.org/{i}/{j}", "title": f"Result {j} for run {i}"}
        | {"excerpt": "lorem ipsum dolor sit amet " * rng.randint(1, 4)}
        for j in range(rng.randint(0, 5))
    ]
    if rng.random() < 0.7:
        run |= {"status": "ok", "results": results}
    else:
        run |= {
            "status": "error",
            "detail": f"timeout: the provider failed on run {i}",
            "chain": ["httpx.HTTPStatusError", "RuntimeError"],
            "partial_results": results[:3],
            "alternatives": ["retry later", "use news_api instead"],
            "exception_type": "httpx.ReadTimeout",
        }
    if i % 50 == 0:
        run["detail"] = secrets[(i // 50) % len(secrets)]
    return run


def baseline_scrubber(commit: str) -> Any | None:
    """The `Scrubber` of `classifier/scrub.py` at `commit` (None if git cannot show it)."""
    shown = subprocess.run(
        ["git", "show", f"{commit}:classifier/scrub.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if shown.returncode:
        return None
    module = sys.modules["baseline_scrub"] = ModuleType("baseline_scrub")  # dataclasses look it up
    exec(compile(shown.stdout, f"{commit}:classifier/scrub.py", "exec"), module.__dict__)
    return module.Scrubber()


def as_server_does(scrubber: Any, identity: bool) -> Callable[[dict[str, Any]], None]:
    """The scrub of one report as `EnvelopeIn.scrub` runs it: this release's `split` of the
    envelope's fields and the identity fields in one look; the baseline's envelope fields."""

    def scrub(run: dict[str, Any]) -> None:
        values = [run.get(name) for name in ENVELOPE_FIELDS]
        if identity:
            scrubber.split(values, [run[n] for n in IDENTITY_FIELDS if run.get(n)])
        else:
            scrubber.scrub(values)

    return scrub


def best_ms(scrub: Callable[[dict[str, Any]], None], runs: list[dict[str, Any]]) -> float:
    started = time.perf_counter()
    for run in runs:
        scrub(run)
    return (time.perf_counter() - started) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--baseline", default=BASELINE, help="git commit of the baseline")
    parser.add_argument("--forms", type=int, default=0, help="this many corpus forms (0: all)")
    parser.add_argument("--quick", action="store_true", help="200 runs, best of 2, 60 forms")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.repeat, args.forms = 200, 2, 60
    print("load average (1, 5, 15 min) at the start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    secrets = [text for _, text, _ in shapes_corpus.LAYERED]
    runs = [make_run(random.Random(i), i, secrets) for i in range(args.runs)]
    scrubbers: dict[str, Callable[[dict[str, Any]], None]] = {}
    old = baseline_scrubber(args.baseline)
    if old is not None:
        scrubbers["baseline"] = as_server_does(old, identity=False)
    scrubbers["server (RE2)"] = as_server_does(Scrubber(None, compile_re2), identity=True)
    scrubbers["client (re)"] = as_server_does(Scrubber(), identity=True)
    best = dict.fromkeys(scrubbers, float("inf"))
    for _ in range(args.repeat):  # interleaved: a burst of load hits every scrubber
        for name, scrub in scrubbers.items():
            best[name] = min(best[name], best_ms(scrub, runs))
    print(f"\n{args.runs:,}-run batch, one run in 50 with a secret, best of {args.repeat}")
    print(f"{'scrubber':<16}{'ms/1,000 runs':>14}{'vs baseline':>13}")
    for name, ms in best.items():
        ratio = f"{ms / best['baseline']:.2f}x" if "baseline" in best else "n/a"
        print(f"{name:<16}{ms * 1000 / args.runs:>14.2f}{ratio:>13}")
    if old is None:
        print(f"baseline: commit {args.baseline} not found by git, no ratio")
    forms = [e["text"] for e in shapes_corpus.GITLEAKS] + secrets
    forms = forms[: args.forms] if args.forms else forms
    print(f"\nthe secret corpus, {len(forms)} forms as text, once")
    for name, scrubber in (
        ("server (RE2)", Scrubber(None, compile_re2)),
        ("client (re)", Scrubber()),
    ):
        started = time.perf_counter()
        for text in forms:
            scrubber.text(text)
        elapsed = (time.perf_counter() - started) * 1e6 / len(forms)
        print(f"{name:<16}{elapsed:>10.1f} µs/form")
    return 0


if __name__ == "__main__":
    sys.exit(main())
