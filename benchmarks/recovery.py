"""Recovery benchmark: blind retries, a status-aware retry library and Failsight on the same
seeded workload.

1,000 subagent tasks (100 workflows of 10 topics; each workflow's capability has a primary and a
backup source) with the failure mix of a real pipeline: about a third permanent failures (auth,
missing, invalid, and server faults that say a retry cannot help: a 501, a 503 with
`x-should-retry: false`), two thirds transient ones (timeouts, 5xx, rate limits with
Retry-After), some failing after gathering partial results, some sources valid-empty; an auth
failure is an expired token on a source whose credentials a refresh renews, a revoked key on one
whose credentials only a person replaces (recovery_world.py says which). The workload runs three
times, in-process on one simulated timeline (recovery_world.py: each run gives way at each of its
waits, so all runs' calls happen in time order), in this column order:

* blind: the coordinator's own code (workflow.step / dispatch_due / execute_run, routing.decide)
  with every failure looking the same (no classification, no Retry-After), retried 3 times, no
  refresh, and a subagent's partial results dying with its exception; the report says "no
  results" for a topic without results (the naive synthesis). A baseline, not what a user would
  pick instead.
* status-aware: what a user would pick instead (recovery_sdk.py): tenacity retrying only what the
  project's classifier calls retryable, 3 attempts, waiting the failed call's own Retry-After, no
  switching, no refresh, no partial results; the same naive report.
* Failsight: the product as shipped, through the coordinator's own code (classifier, the shipped
  default routing policy, local recovery, credential refreshers registered beside the token
  sources in the source registry, budget, breaker, coverage, review items).

Per arm, the table counts:

* wasted calls: calls that could not succeed, a repeat of a request that already failed
  permanently on that source (an expired token not refreshed since counts; one refreshed does
  not) or a call inside a Retry-After window;
* calls inside a Retry-After window: calls to a source while a Retry-After it gave to any query
  was still running;
* retries against the signal: repeats of a request whose failure said a retry cannot help
  although its kind is usually retryable (the 501 and the x-should-retry: false above); the
  product's own count (`Run.objects.futile_retries()`) is printed below;
* partial results kept, of one total for all arms: the items a failed call gathered on a
  (topic, source) that never answered in full in any arm, kept in a run's partial results or
  replaced by that source's full answer later;
* silent holes: failed topics reported as having no results;
* settled or waiting only on a human: simulated seconds until every workflow has settled or has
  an open review item and no run pending;
* the modelled operator: it answers each review item `--operator-delay` simulated seconds
  (default 300) after the item opened, through actions.do_resolve_review, as a reasonable
  operator would (switch source when one is left, abort a request that is itself invalid, else
  accept the partial results); then the time until every workflow has settled;
* dollars spent and dollars wasted: every call (wasted calls only) priced by the product's price
  table (orchestrator.pricing, the rows recovery_world.MODEL_PRICES and PRICE_PER_CALL put in the
  benchmark's database) at the call's token counts (recovery_world's docstring);
* hours of delay (`delays`), counted the same way in every arm: over the topics that failed, the
  time from a topic's first failed call until its first full answer or, without one, until a
  person has decided about it: the human answer time H (`--operator-delay`, the modelled
  operator's) after the arm left the topic to a person, when its first review item opened or else
  when its workflow's report was ready. The failed topics left without a full answer are counted
  beside it, and the hours split between topics answered in full and the others.

Below the table: the critical path of the providers' waits on the preferred paths
(recovery_world.critical_path; not a lower bound, an arm that gives up sooner settles before it),
which Failsight's time until settled or waiting only on a human should stay within 1.5 times of;
then Failsight's goals against the status-aware arm, each said met or not.

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
from decimal import Decimal
from pathlib import Path
from typing import Any

from recovery_world import (
    AGENT_MODEL,
    CALL_TOKENS,
    CONTEXT_TOKENS,
    ITEM_TOKENS,
    MODEL_PRICES,
    PRICE_PER_CALL,
    START,
    CriticalPath,
    Timeline,
    World,
    critical_path,
    refreshable,
    workload,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BLIND, AWARE, FAILSIGHT = "blind", "status-aware", "Failsight"
ARMS = (BLIND, AWARE, FAILSIGHT)


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


def put_prices(workflows: list[tuple[str, list[str]]]) -> None:
    """Put the world's prices in the product's price table: the agent's model per million tokens,
    each source per call, in effect from before the benchmark's start."""
    from orchestrator import pricing
    from orchestrator.models import Price

    since = START - timedelta(days=1)
    rows = [
        Price(
            kind=Price.Kind.MODEL,
            name=model,
            effective_from=since,
            input_per_million=Decimal(given),
            output_per_million=Decimal(made),
        )
        for model, (given, made) in MODEL_PRICES.items()
    ]
    rows += [
        Price(
            kind=Price.Kind.SOURCE_CALL,
            name=f"{cap}_{role}",
            effective_from=since,
            per_call=Decimal(per_call),
        )
        for cap in sorted({cap for cap, _ in workflows})
        for role, per_call in PRICE_PER_CALL.items()
    ]
    Price.objects.filter(name__in=[r.name for r in rows]).delete()
    Price.objects.bulk_create(rows)
    pricing.forget()


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


def run_arm(arm: str, tasks: int, seed: int, operator_delay: float) -> dict[str, Any]:
    from orchestrator.coordination.simulation import simulated

    began = time.monotonic()
    random.seed(seed)
    scenarios, workflows = workload(tasks, seed)
    world = World(naive=arm != FAILSIGHT, scenarios=scenarios)
    if arm == AWARE:
        import recovery_sdk

        with simulated(START) as (clock, disp):
            timeline = world.clock = Timeline(clock, disp)
            done = recovery_sdk.run_tasks(world, timeline, workflows)
        stats = recovery_sdk.stats(world, done, workflows)
        handed = recovery_sdk.settled(done, workflows)
    else:
        stats, handed = run_coordinated(arm, world, workflows, operator_delay)
    stats |= measure(world)
    total, answered, stats["failed topics without a full answer"] = delays(
        world, handed, operator_delay
    )
    stats["hours of delay"] = total
    stats["hours of delay, topics answered in full"] = answered
    stats["hours of delay, topics left to a person"] = round(total - answered, 2)
    stats["real seconds"] = round(time.monotonic() - began, 1)
    return stats


def run_coordinated(arm: str, world: World, workflows: list, operator_delay: float) -> tuple:
    """Run the workload through the coordinator's own code: the blind arm under blind_patches,
    Failsight as shipped with a refresher beside each token source; return the arm's figures and
    when each topic was left to a person (`delays`)."""
    from orchestrator.coordination import registry, workflow
    from orchestrator.coordination.simulation import simulated
    from orchestrator.models import ReviewItem, Run, SourceHealth, Workflow

    blind = arm == BLIND
    reg = registry.Registry()
    for cap, _ in workflows:
        for role in ("primary", "backup"):
            name = f"{cap}_{role}"
            refresher = world.refresher(name) if not blind and refreshable(name) else None
            reg.register(cap, name, world.source(name), refresher=refresher)
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
    stats = coverage(world, wfs, runs, blind)
    stats |= {
        "review items opened": opened,
        "review items answered by the operator": answered,
        "automatic settle time (s)": round(automatic, 1),
        "workflows neither settled nor waiting on a human": not_waiting,
        "settle time with the operator (s)": round(with_operator, 1),
        "workflows not settled at the end": sum(wf.status not in wf.FINISHED for wf in wfs),
        "credential refreshes": world.refreshes,
    }
    handed = left_to_a_person(ids, wfs, runs)
    recorded = Run.objects.filter(workflow_id__in=ids)
    stats["futile retries recorded"] = recorded.futile_retries().count()
    stats["early retries recorded"] = recorded.early_retries().count()
    Workflow.objects.filter(pk__in=ids).delete()
    registry.use_registry(None)
    return stats, handed


def left_to_a_person(ids: list[int], wfs, runs) -> dict[str, datetime]:
    """{topic: when the arm left it to a person}: its first review item's opening, else its
    workflow's settling (the report ready)."""
    from orchestrator.models import ReviewItem

    settled: dict[int, datetime] = {wf.pk: wf.finished_at or START for wf in wfs}
    for r in runs:
        settled[r.workflow_id] = max(settled[r.workflow_id], r.finished_at or START)
    out = {topic: settled[wf.pk] for wf in wfs for topic in wf.topics}
    items = ReviewItem.objects.filter(workflow_id__in=ids).order_by("-created_at")
    for topic, opened in items.values_list("run__topic", "created_at"):
        out[topic] = opened
    return out


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


def coverage(world: World, wfs, runs, blind: bool) -> dict[str, Any]:
    """What the coordinated arm's report says of its failed topics, and the partials it kept."""
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
    return {
        "partial results kept": kept,
        "topics reported as gaps with a reason": gaps,
        "silent holes": holes,
    }


def measure(world: World) -> dict[str, Any]:
    """The world's ground truth of an arm's calls."""
    from orchestrator import pricing

    table = pricing.current()
    wasted = [c for c in world.log if c.wasted]
    return {
        "calls made": len(world.log),
        "wasted calls": len(wasted),
        "calls inside a Retry-After window": sum(c.early for c in world.log),
        "retries against the signal": world.against_signal,
        # Counted over the same total in every arm: see `same_partial_total`.
        "partial results preserved": world.superseded_partials(),
        "partial results gathered": world.needed_partials(),
        "dollars spent": dollars(table, world.log),
        "dollars wasted": dollars(table, wasted),
    }


def dollars(table: Any, calls: list) -> float:
    """The calls' cost by the product's price table: the agent's model tokens of each call, and
    its source's price per call unless the provider refused it (recovery_world's docstring)."""
    total = Decimal(0)
    for c in calls:
        tokens = CONTEXT_TOKENS + ITEM_TOKENS * c.items
        source = "" if c.refused else c.source
        priced = table.cost(AGENT_MODEL, tokens, CALL_TOKENS, None, source, 1, c.began)
        assert priced is not None, f"the price table prices {AGENT_MODEL} and {c.source}"
        total += priced[0]
    return round(float(total), 4)


def delays(world: World, handed: dict[str, datetime], human: float) -> tuple[float, float, int]:
    """The hours of delay (the module's definition) with H = `human` seconds: in all, of the
    topics answered in full, and how many failed topics had no full answer."""
    failed: dict[str, datetime] = {}
    answered: dict[str, datetime] = {}
    for c in sorted(world.log, key=lambda c: c.ended):
        if c.ok:
            answered.setdefault(c.topic, c.ended)
        elif c.topic not in answered:
            failed.setdefault(c.topic, c.ended)
    total = in_full = timedelta()
    for topic, at in failed.items():
        if topic in answered:
            in_full += answered[topic] - at
        else:
            total += handed[topic] + timedelta(seconds=human) - at
    total += in_full
    hours = round(total.total_seconds() / 3600, 2)
    return hours, round(in_full.total_seconds() / 3600, 2), len(set(failed) - set(answered))


def same_partial_total(arms: dict[str, dict]) -> None:
    """Count every arm's preserved partial items over one total: the items a failing call
    gathered on a (topic, source) that never succeeded, in any arm (the arms route differently,
    so each alone has a different set). An item counts as preserved in an arm that kept it in a
    run's partial results, or whose source answered in full later there."""
    total = set().union(*(arm["partial results gathered"] for arm in arms.values()))
    for arm in arms.values():
        kept = arm["partial results preserved"] | arm.pop("partial results kept", set())
        arm["partial results preserved"] = len(kept & total)
        arm["partial results gathered"] = len(total)


ROWS = [
    ("calls made", "calls made"),
    ("wasted calls", "wasted calls (could not succeed)"),
    ("calls inside a Retry-After window", "calls inside a Retry-After window (any query's)"),
    ("retries against the signal", "retries against a 'retry cannot help' signal"),
    ("credential refreshes", "credential refreshes"),
    ("partial results preserved", "partial results kept"),
    ("partial results gathered", "partial results gathered (one total)"),
    ("topics reported as gaps with a reason", "topics reported as gaps with a reason"),
    ("silent holes", "silent holes"),
    ("failed topics without a full answer", "failed topics without a full answer"),
    ("review items opened", "review items opened"),
    ("automatic settle time (s)", "settled or waiting only on a human (s)"),
    ("workflows neither settled nor waiting on a human", "workflows neither (at that time)"),
    ("review items answered by the operator", "review items answered by the operator"),
    ("settle time with the operator (s)", "all settled, with the operator (s)"),
    ("workflows not settled at the end", "workflows not settled at the end"),
    ("hours of delay", "hours of delay"),
    ("hours of delay, topics answered in full", "  of topics answered in full"),
    ("hours of delay, topics left to a person", "  of topics left to a person"),
    ("dollars spent", "dollars spent"),
    ("dollars wasted", "dollars wasted"),
]
WIDTH = 52


def table(arms: dict[str, dict]) -> list[str]:
    lines = [f"{'metric':<{WIDTH}}" + "".join(f"{name:>14}" for name in arms)]
    for key, label in ROWS:
        lines.append(f"{label:<{WIDTH}}" + "".join(f"{arm[key]:>14}" for arm in arms.values()))
    return lines


def goals(aware: dict, fs: dict) -> list[str]:
    """Failsight's goals, against the status-aware arm: each with its figure and whether met."""
    total = fs["partial results gathered"]

    def ratio(key: str) -> float:
        return fs[key] / aware[key] if aware[key] else (0.0 if not fs[key] else float("inf"))

    said = {True: "met", False: "NOT met"}
    unanswered, hours = "failed topics without a full answer", "hours of delay"
    return [
        f"goal: Failsight wasted calls 0: {fs['wasted calls']}, {said[fs['wasted calls'] == 0]}",
        f"goal: Failsight calls inside a Retry-After window 0: "
        f"{fs['calls inside a Retry-After window']}, "
        f"{said[fs['calls inside a Retry-After window'] == 0]}",
        f"goal: Failsight partial results kept 100 %: "
        f"{share(fs['partial results preserved'], total)}, "
        f"{said[fs['partial results preserved'] == total]}",
        f"goal: failed topics without a full answer <= 0.25x the status-aware arm's: "
        f"{fs[unanswered]} / {aware[unanswered]} = {ratio(unanswered):.2f}x, "
        f"{said[ratio(unanswered) <= 0.25]}",
        f"goal: hours of delay <= 0.5x the status-aware arm's: {fs[hours]} / {aware[hours]} = "
        f"{ratio(hours):.2f}x, {said[ratio(hours) <= 0.5]}",
    ]


def share(part: int, total: int) -> str:
    return f"{part} ({part / (total or 1):.0%})"


def report(arms: dict[str, dict], path: CriticalPath, delay: float, seconds: float) -> str:
    blind, aware, fs = arms[BLIND], arms[AWARE], arms[FAILSIGHT]
    auto = fs["automatic settle time (s)"]
    lines = [
        *table(arms),
        "",
        f"hours of delay, in every arm: each failed topic from its first failed call until its "
        f"first full answer, else until a person decided about it, assumed {delay:.0f} s (the "
        "modelled operator's answer time) after the arm left it to a person (its first review "
        "item, else its workflow's report)",
        f"modelled operator: answers each review item {delay:.0f} s after it opened, through "
        "actions.do_resolve_review (switch source if one is left, abort an invalid request, "
        "else accept the partial results)",
        f"critical path of the providers' waits on the preferred paths: {path.seconds:.1f} s "
        f"({path.why}); not a lower bound (an arm that gives a topic up or switches sooner "
        f"settles before it). Failsight settles or waits only on a human at {auto:.1f} s = "
        f"{times(auto, path.seconds)} it (target <= 1.5x); status-aware "
        f"{aware['automatic settle time (s)']:.1f} s, "
        f"blind {blind['automatic settle time (s)']:.1f} s",
        f"silent holes: Failsight {fs['silent holes']} (target 0); the product's early-retries "
        f"set counts {fs['early retries recorded']} (target 0); its futile-retries set counts "
        f"{fs['futile retries recorded']} (target 0)",
        *goals(aware, fs),
        f"price table: {AGENT_MODEL} at ${MODEL_PRICES[AGENT_MODEL][0]} / "
        f"${MODEL_PRICES[AGENT_MODEL][1]} per million input / output tokens; a source call "
        + ", ".join(f"${p} ({role})" for role, p in PRICE_PER_CALL.items()),
        "real time per arm: "
        + ", ".join(f"{name} {arm['real seconds']:.1f} s" for name, arm in arms.items())
        + f"; benchmark ran in {seconds:.1f} s real time",
    ]
    return "\n".join(lines)


def times(seconds: float, bound: float) -> str:
    return f"{seconds / bound:.2f}x" if bound else "n/a"


def main(argv: list[str] | None = None) -> dict[str, dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--operator-delay",
        type=float,
        default=300.0,
        help="simulated seconds a person takes to answer: the modelled operator's answer to a "
        "review item, and the human answer time in the hours of delay of every arm",
    )
    parser.add_argument("--database-url", default=None, help="default: SQLite in memory")
    args = parser.parse_args(argv)
    setup_django(args.database_url)
    # The figures are simulated (a driven clock), but the run time is real: say how busy we were.
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    began = time.monotonic()
    scenarios, workflows = workload(args.tasks, args.seed)
    put_prices(workflows)
    arms = {arm: run_arm(arm, args.tasks, args.seed, args.operator_delay) for arm in ARMS}
    same_partial_total(arms)
    path = critical_path(scenarios, workflows)
    print(f"Recovery benchmark: {args.tasks} subagent tasks, seed {args.seed}")
    print(f"load average (1, 5, 15 min) at the start: {load}")
    elapsed = time.monotonic() - began
    print(report(arms, path, args.operator_delay, elapsed))
    return arms


if __name__ == "__main__":
    main()
