"""Recovery benchmark: blind retries vs classified routing on the same seeded workload.

1,000 subagent tasks (100 workflows of 10 topics; each workflow's capability has a primary and a
backup source) with the failure mix of a real pipeline: about a third permanent failures (auth,
missing, invalid, and server faults that say a retry cannot help: a 501, a 503 with
`x-should-retry: false`), two thirds transient ones (timeouts, 5xx, rate limits with
Retry-After), some failing after gathering partial results, some sources valid-empty. The
workload runs twice through the coordinator's own code (workflow.step / dispatch_due /
execute_run, routing.decide, the budget and coverage), in-process on one simulated timeline
(recovery_world.py: each run gives way at each of its waits, so all runs' calls happen in time
order):

* blind: every failure looks the same (no classification, no Retry-After), is retried 3 times,
  and a subagent's partial results die with its exception; the report says "no results" for a
  topic without results (the naive synthesis).
* classified: the product as shipped (classifier, routing table, local recovery, budget, breaker,
  coverage).

Per arm, the table counts:

* wasted calls: calls that could not succeed, a repeat of a request that already failed
  permanently on that source or a call inside a Retry-After window;
* calls inside a Retry-After window: calls to a source while a Retry-After it gave to any query
  was still running;
* retries against the signal: repeats of a request whose failure said a retry cannot help
  although its kind is usually retryable (the 501 and the x-should-retry: false above); the
  product's own count (`Run.objects.futile_retries()`) is printed below;
* partial results kept, of one total for both arms: the items a failed call gathered on a
  (topic, source) that never answered in full in either arm, kept in a run's partial results or
  replaced by that source's full answer later;
* silent holes: failed topics reported as having no results;
* settled or waiting only on a human: simulated seconds until every workflow has settled or has
  an open review item and no run pending;
* the modelled operator: it answers each review item `--operator-delay` simulated seconds
  (default 300) after the item opened, through actions.do_resolve_review, as a reasonable
  operator would (switch source when one is left, abort a request that is itself invalid, else
  accept the partial results); then the time until every workflow has settled;
* dollars wasted: the wasted calls at a fixed price a call (PRICE_PER_CALL: $0.002 on a primary
  source, $0.005 on a backup); the retries against the signal are among them;
* hours of delay: over the topics that failed, the time from a topic's first failed call until
  its first full answer or, without one, until its workflow settled; the failed topics left
  without a full answer are counted beside it.

Below the table, the lower bound (recovery_world.lower_bound): the critical path of the waits the
providers impose, with zero processing time. The classified arm's time until settled or waiting
only on a human should be at most 1.5 times it.

    .venv/bin/python benchmarks/recovery.py [--tasks 1000] [--seed 7] [--operator-delay 300]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import sys
import time
from collections import defaultdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from recovery_world import (
    PRICE_PER_CALL,
    START,
    Bound,
    Timeline,
    World,
    lower_bound,
    workload,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


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
        (policy, "current_snapshot", lambda project_id=None: snap),
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


def run_arm(blind: bool, tasks: int, seed: int, operator_delay: float) -> dict[str, Any]:
    from orchestrator.coordination import registry, workflow
    from orchestrator.coordination.simulation import simulated
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
        timeline = world.clock = Timeline(clock, disp)
        ids = [
            workflow.start_workflow(f"recovery-benchmark {i}", topics, cap).pk
            for i, (cap, topics) in enumerate(workflows)
        ]
        timeline.drive()
        automatic, not_waiting = settle_time(ids, automatic=True)
        opened = ReviewItem.objects.filter(workflow_id__in=ids).count()
        answered = operate(ids, timeline, operator_delay)
        with_operator, _ = settle_time(ids, automatic=False)
    wfs = list(Workflow.objects.filter(pk__in=ids))
    runs = list(Run.objects.filter(workflow_id__in=ids))
    stats = measure(world, wfs, runs, blind)
    stats |= {
        "review items opened": opened,
        "review items answered by the operator": answered,
        "automatic settle time (s)": round(automatic, 1),
        "workflows neither settled nor waiting on a human": not_waiting,
        "settle time with the operator (s)": round(with_operator, 1),
        "workflows not settled at the end": sum(wf.status not in wf.FINISHED for wf in wfs),
    }
    stats["hours of delay"], stats["failed topics without a full answer"] = delays(world, wfs, runs)
    recorded = Run.objects.filter(workflow_id__in=ids)
    stats["futile retries recorded"] = recorded.futile_retries().count()
    stats["early retries recorded"] = recorded.early_retries().count()
    Workflow.objects.filter(pk__in=ids).delete()
    registry.use_registry(None)
    stats["real seconds"] = round(time.monotonic() - began, 1)
    return stats


def settle_time(ids: list[int], automatic: bool) -> tuple[float, int]:
    """Return the simulated seconds until every workflow settled (or, `automatic`, settled or
    waits only on a human: an open review item and no run pending), and how many workflows are
    in neither state."""
    from orchestrator.models import ReviewItem, Run, Workflow

    runs = Run.objects.filter(workflow_id__in=ids)
    moments = [START, *runs.exclude(finished_at=None).values_list("finished_at", flat=True)]
    wfs = Workflow.objects.filter(pk__in=ids)
    moments += wfs.exclude(finished_at=None).values_list("finished_at", flat=True)
    open_items = ReviewItem.objects.open().filter(workflow_id__in=ids)
    waiting = set(open_items.values_list("workflow_id", flat=True)) if automatic else set()
    waiting -= set(runs.pending().values_list("workflow_id", flat=True))
    if automatic:
        moments += open_items.values_list("created_at", flat=True)
    unsettled = wfs.exclude(status__in=Workflow.FINISHED).values_list("pk", flat=True)
    return (max(moments) - START).total_seconds(), len(set(unsettled) - waiting)


def operator_answer(item) -> str:
    """What a reasonable operator answers: another source when one is left, a stop for a request
    that is itself wrong, else the partial results kept (a gap with its reason if none)."""
    from orchestrator.coordination import review
    from orchestrator.vocabulary import FailureCategory

    resolution = review.Resolution
    if item.failure_type == FailureCategory.INVALID_INPUT:
        return resolution.ABORT
    options = {o.value: o.available for o in review.resolution_options(item)}
    if options[resolution.SWITCH_SOURCE]:
        return resolution.SWITCH_SOURCE
    return resolution.ACCEPT_PARTIAL


def operate(ids: list[int], timeline: Timeline, delay: float) -> int:
    """The modelled operator: answer each open item `delay` simulated seconds after it opened,
    through the product's own resolution, and let the coordinator continue; return how many."""
    from django.contrib.auth import get_user_model

    from orchestrator.coordination.actions import do_resolve_review
    from orchestrator.models import ReviewItem
    from orchestrator.vocabulary import Channel

    operator, _ = get_user_model().objects.get_or_create(username="benchmark-operator")
    answered = 0
    while items := list(
        ReviewItem.objects.open().filter(workflow_id__in=ids).select_related("run", "workflow")
    ):
        due = {
            item: max(item.created_at, item.run.finished_at or item.created_at)
            + timedelta(seconds=delay)
            for item in items
        }
        timeline.clock.advance_to(min(due.values()))
        for item, at in due.items():
            if at <= timeline.now():
                note = "The benchmark's modelled operator."
                answered += do_resolve_review(
                    item, operator, operator_answer(item), channel=Channel.DASHBOARD, note=note
                )
        timeline.drive()
    return answered


def measure(world: World, wfs, runs, blind: bool) -> dict[str, Any]:
    kept = {p.get("url") for r in runs for p in r.partial_results}
    results_by_topic: dict[str, int] = defaultdict(int)
    for r in runs:
        results_by_topic[r.topic] += r.result_count
    gaps = holes = 0
    for wf in wfs:
        for topic in wf.topics:
            failed = topic in world.failed_topics
            if blind:  # the naive report: a topic without results "has no results"
                holes += failed and results_by_topic[topic] == 0
                continue
            entry = wf.coverage.get(topic, {})
            gaps += entry.get("verdict") == "gap" and bool(entry.get("why"))
            holes += failed and entry.get("verdict") == "empty" and not entry.get("failures")
    wasted = [c for c in world.log if c.wasted]
    return {
        "calls made": len(world.log),
        "wasted calls": len(wasted),
        "calls inside a Retry-After window": sum(c.early for c in world.log),
        "retries against the signal": world.against_signal,
        # Counted over the same total in both arms: see `same_partial_total`.
        "partial results preserved": kept | world.superseded_partials(),
        "partial results gathered": world.needed_partials(),
        "topics reported as gaps with a reason": gaps,
        "silent holes": holes,
        "dollars wasted": round(sum(price(c.source) for c in wasted), 4),
    }


def price(source: str) -> float:
    return PRICE_PER_CALL[source.rpartition("_")[2]]


def delays(world: World, wfs, runs) -> tuple[float, int]:
    """Return the hours from each failed topic's first failed call until its first full answer,
    or without one until its workflow settled, and how many failed topics had none."""
    settled: dict[int, datetime] = {wf.pk: wf.finished_at or START for wf in wfs}
    workflow_of = {}
    for r in runs:
        workflow_of[r.topic] = r.workflow_id
        settled[r.workflow_id] = max(settled[r.workflow_id], r.finished_at or START)
    failed: dict[str, datetime] = {}
    answered: dict[str, datetime] = {}
    for c in sorted(world.log, key=lambda c: c.ended):
        if c.ok:
            answered.setdefault(c.topic, c.ended)
        elif c.topic not in answered:
            failed.setdefault(c.topic, c.ended)
    waited = sum(
        ((answered.get(t) or settled[workflow_of[t]]) - at for t, at in failed.items()), timedelta()
    )
    return round(waited.total_seconds() / 3600, 2), len(set(failed) - set(answered))


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


ROWS = [
    ("calls made", "calls made"),
    ("wasted calls", "wasted calls (could not succeed)"),
    ("calls inside a Retry-After window", "calls inside a Retry-After window (any query's)"),
    ("retries against the signal", "retries against a 'retry cannot help' signal"),
    ("partial results preserved", "partial results kept"),
    ("partial results gathered", "partial results gathered (one total)"),
    ("topics reported as gaps with a reason", "topics reported as gaps with a reason"),
    ("silent holes", "silent holes"),
    ("review items opened", "review items opened"),
    ("automatic settle time (s)", "settled or waiting only on a human (s)"),
    ("workflows neither settled nor waiting on a human", "workflows neither (at that time)"),
    ("review items answered by the operator", "review items answered by the operator"),
    ("settle time with the operator (s)", "all settled, with the operator (s)"),
    ("workflows not settled at the end", "workflows not settled at the end"),
    ("dollars wasted", "dollars wasted"),
    ("hours of delay", "hours of delay"),
    ("failed topics without a full answer", "failed topics without a full answer"),
]


def report(blind: dict, classified: dict, bound: Bound, delay: float, seconds: float) -> str:
    lines = [f"{'metric':<52}{'blind':>12}{'classified':>14}"]
    lines += [f"{label:<52}{blind[key]:>12}{classified[key]:>14}" for key, label in ROWS]
    total = blind["partial results gathered"]
    assert total == classified["partial results gathered"], "both arms run the same workload"
    floor, auto = bound.seconds, classified["automatic settle time (s)"]
    lines += [
        "",
        f"lower bound: {floor:.1f} s, the critical path of the waits the providers impose on the "
        f"preferred paths, with zero processing time ({bound.why}); a topic moved to another "
        "source sooner can finish before it",
        f"settled or waiting only on a human: classified {auto:.1f} s = {times(auto, floor)} the "
        f"bound (target <= 1.5x), {times(auto, bound.retry_after)} the longest Retry-After "
        f"({bound.retry_after:.0f} s); blind {blind['automatic settle time (s)']:.1f} s",
        f"modelled operator: answers each review item {delay:.0f} s after it opened, through "
        "actions.do_resolve_review (switch source if one is left, abort an invalid request, "
        "else accept the partial results)",
        f"wasted calls: {ratio(blind['wasted calls'], classified['wasted calls'])} than blind "
        f"(target 100 % fewer); calls made: {ratio(blind['calls made'], classified['calls made'])}",
        f"partial results kept, of the same {total} in both arms: "
        f"blind {share(blind['partial results preserved'], total)}, "
        f"classified {share(classified['partial results preserved'], total)} (target 100 %)",
        f"silent holes: classified {classified['silent holes']} (target 0); calls inside a "
        "Retry-After window, any query's: classified "
        f"{classified['calls inside a Retry-After window']} (target 0); the product's "
        f"early-retries set counts {classified['early retries recorded']} (target 0)",
        "retries against a 'retry cannot help' signal: classified "
        f"{classified['retries against the signal']} (target 0); the product's futile-retries "
        f"set counts {classified['futile retries recorded']} (target 0)",
        f"price table: {price_table()} a call",
        f"real time per arm: blind {blind['real seconds']:.1f} s, "
        f"classified {classified['real seconds']:.1f} s; "
        f"benchmark ran in {seconds:.1f} s real time",
    ]
    return "\n".join(lines)


def times(seconds: float, bound: float) -> str:
    return f"{seconds / bound:.2f}x" if bound else "n/a"


def price_table() -> str:
    return ", ".join(f"${p:.3f} ({role})" for role, p in PRICE_PER_CALL.items())


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--operator-delay",
        type=float,
        default=300.0,
        help="simulated seconds the modelled operator takes to answer a review item",
    )
    parser.add_argument("--database-url", default=None, help="default: SQLite in memory")
    args = parser.parse_args(argv)
    setup_django(args.database_url)
    # The figures are simulated (a driven clock), but the run time is real: say how busy we were.
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    began = time.monotonic()
    blind = run_arm(True, args.tasks, args.seed, args.operator_delay)
    classified = run_arm(False, args.tasks, args.seed, args.operator_delay)
    same_partial_total(blind, classified)
    bound = lower_bound(*workload(args.tasks, args.seed))
    print(f"Recovery benchmark: {args.tasks} subagent tasks, seed {args.seed}")
    print(f"load average (1, 5, 15 min) at the start: {load}")
    elapsed = time.monotonic() - began
    print(report(blind, classified, bound, args.operator_delay, elapsed))
    return {"blind": blind, "classified": classified}


if __name__ == "__main__":
    main()
