"""Recovery benchmark: blind retries vs classified routing on the same seeded workload.

1,000 subagent tasks (100 workflows of 10 topics; each workflow's capability has a primary and a
backup source) with the failure mix of a real pipeline: about a third permanent failures (auth,
missing, invalid, and server faults that say a retry cannot help: a 501, a 503 with
`x-should-retry: false`), two thirds transient ones (timeouts, 5xx, rate limits with
Retry-After), some failing after gathering partial results, some sources valid-empty. The
workload runs twice through the coordinator's own code (workflow.step / dispatch_due /
execute_run, routing.decide, the budget and coverage), driven in-process with a simulated clock:

* blind: every failure looks the same (no classification, no Retry-After), is retried 3 times,
  and a subagent's partial results die with its exception; the report says "no results" for a
  topic without results (the naive synthesis).
* classified: the product as shipped (classifier, routing table, local recovery, budget, breaker,
  coverage).

Both arms' preserved partial results are counted over one total (items gathered by a failed
call on a source that never answered in full, in either arm), and each arm's wall-clock until
every workflow settled (simulated) is printed beside the other, with the real time each took.

A call is *wasted* if it could not succeed: a repeat of a request that already failed permanently
on that source, or a call made while the provider's Retry-After was still running. A *retry
against the signal* is a repeat of a request whose failure said a retry cannot help although its
kind is usually retryable (the 501 and the x-should-retry: false above); the product's own count
of them (`Run.objects.futile_retries()`) is printed for the classified arm.

    .venv/bin/python benchmarks/recovery.py [--tasks 1000] [--seed 7]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

START = datetime(2025, 1, 1, tzinfo=UTC)
TOPICS_PER_WORKFLOW = 10
CAPABILITIES = 50
# (scenario, weight): a third permanent, two thirds transient, some valid-empty.
MIX = [
    ("auth", 11),
    ("missing", 11),
    ("invalid", 8),
    ("partial_then_auth", 4),
    ("timeout", 17),
    ("server_fault", 11),
    ("not_implemented", 3),
    ("declined", 2),
    ("rate_limited", 15),
    ("partial_then_timeout", 8),
    ("empty", 10),
]
# A 501 and a 503 with x-should-retry: false: server faults whose answer says a retry cannot help.
SAYS_NO_RETRY = {"not_implemented", "declined"}
PERMANENT = {"auth", "missing", "invalid", "partial_then_auth", *SAYS_NO_RETRY}
RETRY_AFTERS = [1, 2, 5, 10, 30]
CALL_SECONDS = 0.2
TIMEOUT_SECONDS = 10.0


def setup_django(database_url: str | None) -> None:
    if database_url:
        os.environ["DATABASE_URL"] = database_url
    else:
        os.environ["DATABASE_URL"] = "sqlite://:memory:"  # one process, one connection
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # DEBUG keeps every query in memory; the benchmark makes hundreds of thousands.
    os.environ["DEBUG"] = "0"
    os.environ.setdefault("SECRET_KEY", "recovery-benchmark-only")
    os.environ["FAILSIGHT_SOURCE_MODULES"] = ""
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


@dataclass
class Scenario:
    kind: str
    fails: int = 0  # transient failures before success
    retry_after: int = 0
    partial: int = 0


@dataclass
class World:
    """The simulated providers: ground truth for every call, on per-run clocks."""

    blind: bool
    scenarios: dict[tuple[str, str], Scenario]
    clock: Any = None
    calls: int = 0
    wasted: int = 0
    early: int = 0
    against_signal: int = 0
    said_no_retry: set[tuple[str, str]] = field(default_factory=set)
    windows: dict[str, tuple[datetime, datetime]] = field(default_factory=dict)
    failed_permanently: set[tuple[str, str]] = field(default_factory=set)
    attempts: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    failed_topics: set[str] = field(default_factory=set)
    succeeded: set[tuple[str, str]] = field(default_factory=set)
    partial_of: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))

    def needed_partials(self) -> set[str]:
        """Partial items of (topic, source) pairs that never succeeded in this arm."""
        return {
            u for key, urls in self.partial_of.items() if key not in self.succeeded for u in urls
        }

    def superseded_partials(self) -> set[str]:
        """Partial items of pairs that later succeeded here: replaced by the full answer."""
        return {u for key, urls in self.partial_of.items() if key in self.succeeded for u in urls}

    def source(self, name: str):
        def call(query: dict[str, Any], partial: list[dict]) -> list[dict]:
            results = self.call(name, query["topic"], partial)
            self.succeeded.add((query["topic"], name))
            return results

        return call

    def call(self, source: str, topic: str, partial: list[dict]) -> list[dict]:
        from demo.inprocess import _exception

        now = self.clock.now()
        key = (topic, source)
        sc = self.scenarios[key]
        self.calls += 1
        self.attempts[key] += 1
        window = self.windows.get(source)
        early = window is not None and window[0] <= now < window[1]
        self.early += early
        self.wasted += early or key in self.failed_permanently
        self.against_signal += key in self.said_no_retry
        url = f"https://{source}.example/search?q={topic}"
        if early:
            self.clock.sleep(CALL_SECONDS)
            left = max(1, int((window[1] - now).total_seconds() + 0.999))
            raise _exception("rate_limited", str(left), url)
        return self.respond(source, topic, key, sc, partial, url)

    def respond(self, source, topic, key, sc: Scenario, partial, url) -> list[dict]:
        from demo.inprocess import _exception

        items = [{"url": f"{url}&item={i}", "partial": True} for i in range(sc.partial)]
        if not self.blind:  # a naive subagent's gathered items die with its exception
            partial.extend(items)
        if sc.kind in ("timeout", "partial_then_timeout") and self.attempts[key] <= sc.fails:
            self.clock.sleep(TIMEOUT_SECONDS)
            self.failed_topics.add(topic)
            self.partial_of[key].update(i["url"] for i in items)
            raise _exception("timeout", "", url)
        self.clock.sleep(CALL_SECONDS)
        if sc.kind in PERMANENT:
            self.partial_of[key].update(i["url"] for i in items)
            self.failed_permanently.add(key)
            self.failed_topics.add(topic)
            if sc.kind in SAYS_NO_RETRY:
                self.said_no_retry.add(key)
                raise says_no_retry(sc.kind, url)
            kind = "auth" if sc.kind == "partial_then_auth" else sc.kind
            raise _exception(kind, "", url)
        if sc.kind == "server_fault" and self.attempts[key] <= sc.fails:
            self.failed_topics.add(topic)
            raise _exception("server_fault", "503", url)
        if sc.kind == "rate_limited" and self.attempts[key] == 1:
            now = self.clock.now()
            self.windows[source] = (now, now + timedelta(seconds=sc.retry_after))
            self.failed_topics.add(topic)
            raise _exception("rate_limited", str(sc.retry_after), url)
        if sc.kind == "empty":
            return []
        return [{"url": f"{url}&r={i}"} for i in range(3)]


def says_no_retry(kind: str, url: str) -> Exception:
    """A server fault whose answer says a retry cannot help, as httpx raises it."""
    import httpx

    from demo.inprocess import _exception, _status_error

    if kind == "not_implemented":
        return _exception("server_fault", "501", url)
    headers = {"x-should-retry": "false"}
    return _status_error(httpx.Request("GET", url), 503, headers, {"error": "not retryable"})


def workload(tasks: int, seed: int) -> tuple[dict, list[tuple[str, list[str]]]]:
    """Return the scenario of every (topic, source) and the workflows (capability, topics)."""
    rng = random.Random(seed)
    kinds = [k for k, w in MIX for _ in range(w)]
    scenarios: dict[tuple[str, str], Scenario] = {}
    workflows = []
    for w in range(0, tasks, TOPICS_PER_WORKFLOW):
        cap = f"cap{(w // TOPICS_PER_WORKFLOW) % CAPABILITIES}"
        topics = [f"t{n}" for n in range(w, min(tasks, w + TOPICS_PER_WORKFLOW))]
        workflows.append((cap, topics))
        for topic in topics:
            kind = rng.choice(kinds)
            sc = Scenario(kind)
            if kind in ("timeout", "server_fault", "partial_then_timeout"):
                sc.fails = rng.choice([1, 1, 2, 3, 5])
            if kind == "rate_limited":
                sc.retry_after = rng.choice(RETRY_AFTERS)
            if kind.startswith("partial"):
                sc.partial = rng.choice([2, 3, 4])
            scenarios[(topic, f"{cap}_primary")] = sc
            backup = "invalid" if kind == "invalid" else rng.choice(["ok"] * 9 + ["empty"])
            scenarios[(topic, f"{cap}_backup")] = Scenario(backup)
    return scenarios, workflows


class RunClock:
    """One run's own timeline: it starts when the run is due and advances with its calls."""

    def __init__(self, start: datetime) -> None:
        self.t = start

    def now(self) -> datetime:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += timedelta(seconds=max(0.0, seconds))


def blind_patches():
    """No classification and the same retry for everything: 3 retries, fixed backoff."""
    from classifier import Failure, FailureCategory
    from orchestrator.coordination import policy, routing

    class Blind:
        def classify(self, exc: BaseException, provider: str | None = None) -> Failure:
            return Failure(FailureCategory.SERVER_FAULT, True, detail=f"failed: {exc}")

    rule = dict(max_attempts=4, base_delay=1.0, max_delay=8.0, multiplier=2.0, jitter="none")
    rows = [
        dict(rule, failure_type=t, action_when_exhausted="accept_partial")
        for t in routing.DEFAULT_RULES
    ]
    snap = routing.PolicySnapshot.from_rows(0, rows)
    return [
        (policy, "current_snapshot", lambda: snap),
        (policy, "current_classifier", lambda: Blind()),
    ]


@contextlib.contextmanager
def patched(patches):
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    for obj, name, value in patches:
        setattr(obj, name, value)
    try:
        yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)


def run_arm(blind: bool, tasks: int, seed: int) -> dict[str, Any]:
    from django.db.models import Max

    from orchestrator.coordination import registry, review, workflow
    from orchestrator.coordination.simulation import drive, simulated
    from orchestrator.models import ReviewItem, Run, SourceHealth, Workflow

    began = time.monotonic()
    random.seed(seed)
    scenarios, workflows = workload(tasks, seed)
    world = World(blind=blind, scenarios=scenarios)
    reg = registry.Registry()
    for cap, _ in workflows:
        for role in ("primary", "backup"):
            reg.register(cap, f"{cap}_{role}", world.source(f"{cap}_{role}"))
    registry.use_registry(reg)
    SourceHealth.objects.all().delete()
    if blind:  # no budget and no breaker either
        SourceHealth.objects.bulk_create(
            SourceHealth(source=s, budget_capacity=1e9, budget_tokens=1e9, breaker_threshold=10**6)
            for s in reg.sources
        )
    with patched(blind_patches() if blind else []), simulated(START) as (clock, disp):
        ids = [
            workflow.start_workflow(f"recovery-benchmark {i}", topics, cap).pk
            for i, (cap, topics) in enumerate(workflows)
        ]

        def run_clock(pk: int) -> RunClock:
            due = Run.objects.filter(pk=pk).values_list("due_at", flat=True).first() or START
            world.clock = RunClock(max(clock.now(), due))
            return world.clock

        drive(clock, disp, run_clock=run_clock)
        # Nobody answers the review queue: each item's fallback applies at its deadline.
        while deadline := ReviewItem.objects.open().aggregate(t=Max("deadline_at"))["t"]:
            clock.advance_to(deadline)
            review.apply_overdue_fallbacks(clock.now())
            drive(clock, disp, run_clock=run_clock)
    wfs = list(Workflow.objects.filter(pk__in=ids))
    runs = list(Run.objects.filter(workflow_id__in=ids))
    stats = measure(world, wfs, runs, blind)
    stats["futile retries recorded"] = (
        Run.objects.filter(workflow_id__in=ids).futile_retries().count()
    )
    Workflow.objects.filter(pk__in=ids).delete()
    registry.use_registry(None)
    stats["real seconds"] = round(time.monotonic() - began, 1)
    return stats


def measure(world: World, wfs, runs, blind: bool) -> dict[str, Any]:
    kept = {p.get("url") for r in runs for p in r.partial_results}
    results_by_topic: dict[str, int] = defaultdict(int)
    for r in runs:
        results_by_topic[r.topic] += r.result_count
    gaps = holes = unsettled = 0
    for wf in wfs:
        if wf.status not in wf.FINISHED:
            unsettled += 1
        for topic in wf.topics:
            failed = topic in world.failed_topics
            if blind:  # the naive report: a topic without results "has no results"
                holes += failed and results_by_topic[topic] == 0
                continue
            entry = wf.coverage.get(topic, {})
            gaps += entry.get("verdict") == "gap" and bool(entry.get("why"))
            holes += failed and entry.get("verdict") == "empty" and not entry.get("failures")
    finished = [r.finished_at for r in runs if r.finished_at]
    wall = (max(finished) - START).total_seconds() if finished else 0.0
    return {
        "calls made": world.calls,
        "wasted calls": world.wasted,
        "calls before Retry-After": world.early,
        "retries against the signal": world.against_signal,
        # Counted over the same total in both arms: see `same_partial_total`.
        "partial results preserved": kept | world.superseded_partials(),
        "partial results gathered": world.needed_partials(),
        "topics reported as gaps with a reason": gaps,
        "silent holes": holes,
        "simulated wall-clock (s)": round(wall, 1),
        "workflows not settled": unsettled,
    }


def ratio(blind: float, classified: float) -> str:
    return f"{(1 - classified / blind) * 100:.1f} % fewer" if blind else "n/a"


def same_partial_total(blind: dict, classified: dict) -> None:
    """Count both arms' preserved partial items over one total: the items a failing call
    gathered on a (topic, source) that never succeeded, in either arm (the arms route
    differently, so each alone has a different set). An item counts as preserved in an arm
    that kept it in a run's partial results, or whose source answered in full later there."""
    total = blind["partial results gathered"] | classified["partial results gathered"]
    for arm in (blind, classified):
        arm["partial results preserved"] = len(arm["partial results preserved"] & total)
        arm["partial results gathered"] = len(total)


def share(part: int, total: int) -> str:
    return f"{part} ({part / (total or 1):.0%})"


def report(blind: dict, classified: dict, seconds: float) -> str:
    lines = [f"{'metric':<40}{'blind':>12}{'classified':>14}"]
    for key in blind:
        if key not in ("futile retries recorded", "real seconds"):  # said below
            lines.append(f"{key:<40}{blind[key]:>12}{classified[key]:>14}")
    total = blind["partial results gathered"]
    assert total == classified["partial results gathered"], "both arms run the same workload"
    wall_b, wall_c = blind["simulated wall-clock (s)"], classified["simulated wall-clock (s)"]
    lines += [
        "",
        f"wall-clock until every workflow settled (simulated): blind {wall_b:.1f} s, "
        f"classified {wall_c:.1f} s ({wall_c / wall_b if wall_b else 0:.2f}x blind); "
        f"real time per arm: blind {blind['real seconds']:.1f} s, "
        f"classified {classified['real seconds']:.1f} s",
        f"wasted calls: {ratio(blind['wasted calls'], classified['wasted calls'])} than blind "
        "(target >= 97 %)",
        f"calls made: {ratio(blind['calls made'], classified['calls made'])} than blind",
        f"partial results preserved, of the same {total} in both arms (gathered by a failed call "
        "on a source that never answered in full): "
        f"blind {share(blind['partial results preserved'], total)}, "
        f"classified {share(classified['partial results preserved'], total)} (target 100 %)",
        f"silent holes: blind {blind['silent holes']}, classified {classified['silent holes']} "
        "(target 0)",
        f"calls before Retry-After (classified): {classified['calls before Retry-After']} "
        "(target 0)",
        "retries against a 'retry cannot help' signal: "
        f"blind {blind['retries against the signal']}, "
        f"classified {classified['retries against the signal']} (target 0); the product's "
        f"futile-retries set counts {classified['futile retries recorded']} (target 0)",
        f"(benchmark ran in {seconds:.1f} s real time)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--database-url", default=None, help="default: a temporary SQLite file")
    args = parser.parse_args(argv)
    setup_django(args.database_url)
    # The figures are simulated (a driven clock), but the run time is real: say how busy we were.
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    began = time.monotonic()
    blind = run_arm(True, args.tasks, args.seed)
    classified = run_arm(False, args.tasks, args.seed)
    same_partial_total(blind, classified)
    print(f"Recovery benchmark: {args.tasks} subagent tasks, seed {args.seed}")
    print(f"load average (1, 5, 15 min) at the start: {load}")
    print(report(blind, classified, time.monotonic() - began))
    return {"blind": blind, "classified": classified}


if __name__ == "__main__":
    main()
