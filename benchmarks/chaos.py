"""Chaos: live workflows through worker SIGKILLs, a PostgreSQL restart, a Redis restart that loses
its data and a broker outage during POST /workflows; then the invariants, counted.

    .venv/bin/python benchmarks/chaos.py [--workflows 30] [--kills 20] [--seed 7] [--json PATH]

It starts its own PostgreSQL cluster and Redis server on free ports (never the machine's shared
ones), migrates a database there, and runs the Procfile's `web` (granian), `worker` and `beat`
against them with short recovery windows (a 5 s lease, 5 s lost-dispatch and nudge windows, a
sweep every second). An agent reports runs through the API the whole time, resending each under
its idempotency key until it is accepted. Then, one after the other:

- baseline: workflows with no fault, the time they take to settle (the ratio's baseline);
- sigkill:  workflows started one after another while the whole worker (main process and
            children) is SIGKILLed `--kills` times at seeded random moments, restarted each time;
- postgres: workflows started, then the PostgreSQL server stopped while they run and started
            again a moment later;
- redis:    workflows started, then Redis killed and started empty (every queued and every
            unacknowledged message lost);
- broker:   Redis stopped, workflows POSTed with an Idempotency-Key (each must be a 201, and a
            client's retry the same workflow), then Redis started again.

After each fault every workflow must settle; this prints how long that took after the last fault
beside its bound: the lease, two recovery windows (a lost step is nudged, and the runs it then
sends may be lost too), two sweeps, and twice the baseline's time for the workflows live at the
fault. At the end it counts what must be zero: runs left running, runs executed beyond their
deliveries (the provider's call log names each call's run and delivery), accepted reports lost,
runs or workflows duplicated under one key, tile counts unequal to raw counts, outbox messages
left; and the load average before and after. Everything it started is removed at the end,
whatever happens. `--json PATH` also writes the figures (tests/orchestrator/test_chaos.py reads
them).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.services import (  # noqa: E402
    PrivatePostgres,
    PrivateRedis,
    Process,
    app_env,
    manage,
    procfile,
    start_web,
    wait_until,
)

LEASE = 5
WINDOW = LEASE  # the lost-dispatch and nudge windows follow the lease
SWEEP = 1  # settings.CELERY_SWEEP_SECONDS
RESEND = 5  # settings.OUTBOX_RESEND_SECONDS: an outbox message the broker refused is sent again
RECOVERY = {
    "RUN_LEASE_SECONDS": str(LEASE),
    "CELERY_VISIBILITY_TIMEOUT": "10",
    "CELERY_CONCURRENCY": "2",
    "WEB_CONCURRENCY": "2",
    "FAILSIGHT_SOURCE_MODULES": "demo.inprocess",
    "SECURE_COOKIES": "0",
    "LOG_LEVEL": "WARNING",
}
# What each topic's first source does: runs that take a moment (so kills find them in flight),
# a retry after a timeout, a switch after a 404, a valid empty answer.
PLANS: list[Any] = [
    "sleep:0.4:ok:2",
    "sleep:0.8:ok:1",
    ["timeout", "sleep:0.3:ok:2"],
    "missing",
    "sleep:0.3:empty",
]
SETTLE_TIMEOUT = 180.0
# The figures that must be zero, and those printed beside them.
ZERO = (
    "unsettled_workflows",
    "runs_left_running",
    "runs_executed_beyond_deliveries",
    "accepted_reports_lost",
    "duplicate_runs_per_key",
    "duplicate_workflows_per_key",
    "tile_counts_unequal_to_raw",
    "outbox_messages_left",
)
CONTEXT = (
    "workflows",
    "runs",
    "runs_delivered_more_than_once",
    "runs_parked",
    "reports_accepted",
    "reports_resent_after_an_error",
    "tile_groups",
)
Bound = Callable[[int], float]  # seconds allowed to settle, given the workflows live at the fault


def log(message: str) -> None:
    print(message, flush=True)


@dataclass
class Stack:
    postgres: PrivatePostgres
    redis: PrivateRedis
    env: dict[str, str]
    var: Path
    token: str = ""
    web: Process | None = None
    worker: Process | None = None
    beat: Process | None = None
    base_url: str = ""
    seed: int = 0

    def start(self) -> None:
        commands = procfile()
        self.web, self.base_url = start_web(self.env, self.var / "web.log")
        self.beat = Process("beat", commands["beat"], self.env, self.var / "beat.log").start()
        self.start_worker()

    def start_worker(self) -> float:
        """Start the worker; return how long it took to be ready."""
        log_path = self.var / "worker.log"
        before = log_path.read_text(errors="replace").count("ready.") if log_path.exists() else 0
        began = time.monotonic()
        self.worker = Process("worker", procfile()["worker"], self.env, log_path).start()
        wait_until(lambda: self.worker.text().count("ready.") > before, 90, "the worker")
        return time.monotonic() - began

    def queued_messages(self) -> int:
        """Messages waiting in the broker or held unacknowledged: what losing Redis loses."""
        import redis

        client = redis.Redis.from_url(self.redis.url(0))
        return sum(client.llen(key) for key in client.scan_iter(match="celery*")) + (
            client.hlen("unacked")
        )

    def stop(self) -> None:
        for process in (self.worker, self.beat, self.web):
            if process is not None:
                process.stop()


def build_stack(var: Path) -> Stack:
    postgres = PrivatePostgres().init()
    redis = PrivateRedis().start()
    database = postgres.create_database("failsight_chaos")
    env = app_env(database, redis.url(0), redis.url(1), var) | RECOVERY
    env["FAILSIGHT_DEMO_CALL_LOG"] = str(var / "calls.jsonl")
    stack = Stack(postgres, redis, env, var)
    manage(env, "migrate", "--noinput")
    stack.token = manage(env, "createtoken", "chaos-agent")
    return stack


def use_database(stack: Stack) -> None:
    """Point this process's Django at the stack's database (no pool: it restarts under us)."""
    os.environ.update({k: v for k, v in stack.env.items() if k != "PATH"}, DATABASE_POOL="0")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()


def orm(call, *args: Any, **kwargs: Any) -> Any:
    """Call an ORM function, waiting out a database restart."""
    from django.db import DatabaseError, connections

    deadline = time.monotonic() + 60
    while True:
        try:
            return call(*args, **kwargs)
        except DatabaseError:
            connections.close_all()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@dataclass
class Reporter:
    """Reports a run every `every` seconds through POST /api/v1/runs, resending each under its
    idempotency key until it is accepted (201); remembers what was accepted."""

    base_url: str
    token: str
    every: float = 0.2
    accepted: dict[str, int] = field(default_factory=dict)
    resent: int = 0
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.base_url, headers=headers, timeout=10) as http:
            n = 0
            while not self.stop.is_set():
                key = f"report-{n}"
                body = dict(
                    status="ok", agent="chaos-reporter", source="reporter", results=[{"n": n}]
                )
                body["attempted"] = {"operation": "report", "n": n}
                while key not in self.accepted:
                    with contextlib.suppress(httpx.HTTPError):
                        answer = http.post(
                            "/api/v1/runs", json=body, headers={"Idempotency-Key": key}
                        )
                        if answer.status_code == 201:
                            self.accepted[key] = answer.json()["id"]
                            continue
                    self.resent += 1
                    time.sleep(0.3)
                n += 1
                self.stop.wait(self.every)


def start_workflow(stack: Stack, seed: int, key: str) -> tuple[int, float, int]:
    """POST /api/v1/workflows under `key` (retried until accepted); return the workflow's id, the
    seconds and the status code of the first attempt (0: no answer). The body depends on the
    seed and the key only, so that a retry sends the very same request."""
    rng = random.Random(f"{seed}:{key}")
    topics = [f"{key}-{t}" for t in ("film", "music")]
    faults: dict[str, Any] = {}
    for topic in topics:
        faults[f"news_api:{topic}"] = rng.choice(PLANS)
        faults[f"news_wire:{topic}"] = "sleep:0.3:ok:1"
    body = {"name": key, "topics": topics, "capability": "news", "input": {"faults": faults}}
    headers = {"Authorization": f"Bearer {stack.token}", "Idempotency-Key": key}
    first: tuple[float, int] | None = None
    deadline = time.monotonic() + 120
    url = f"{stack.base_url}/api/v1/workflows"
    while True:
        began = time.monotonic()
        try:
            answer = httpx.post(url, json=body, headers=headers, timeout=30)
        except httpx.HTTPError:
            answer = None
        if first is None:
            first = (time.monotonic() - began, answer.status_code if answer is not None else 0)
        if answer is not None and answer.status_code == 201:
            return answer.json()["id"], *first
        if time.monotonic() > deadline:
            raise SystemExit(f"POST /workflows for {key} never succeeded: {answer and answer.text}")
        time.sleep(0.5)


def unsettled(ids: list[int]) -> list[int]:
    """The workflows among `ids` with work left: unfinished, and not merely waiting for a human
    with nothing pending (a run parked after its worker died too often escalates)."""
    from orchestrator.models import Run, Workflow

    open_ = Workflow.objects.filter(pk__in=ids).exclude(status__in=Workflow.FINISHED)
    waiting = open_.filter(status=Workflow.Status.AWAITING_REVIEW).exclude(
        runs__status__in=Run.PENDING
    )
    return list(open_.exclude(pk__in=waiting).values_list("pk", flat=True))


def wait_settled(stack: Stack, ids: list[int], since: float) -> float:
    """Wait until every workflow settled; return the seconds since `since` (the last fault)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT
    while orm(unsettled, ids):
        if time.monotonic() > deadline:
            left = orm(unsettled, ids)
            raise SystemExit(
                f"{len(left)} workflows did not settle in {SETTLE_TIMEOUT} s: {left}\n"
                + orm(diagnosis, stack, left)
            )
        time.sleep(0.25)
    return time.monotonic() - since


def diagnosis(stack: Stack, ids: list[int]) -> str:
    """What a stuck workflow's rows, the outbox, the broker and the processes' logs say."""
    from orchestrator.models import OutboxMessage, Run, Workflow

    lines = []
    for wf in Workflow.objects.filter(pk__in=ids):
        runs = list(Run.objects.filter(workflow=wf).values_list("pk", "status", "due_at"))
        lines.append(f"workflow {wf.pk}: {wf.status}, updated {wf.updated_at}; runs {runs}")
    outbox = list(OutboxMessage.objects.values_list("task", "args", "attempts", "last_error"))
    lines.append(f"outbox ({len(outbox)}): {outbox[:10]}")
    try:
        lines.append(f"messages in the broker: {stack.queued_messages()}")
    except Exception as exc:  # the broker itself may be what is wrong
        lines.append(f"broker unreadable: {exc!r}")
    for process in (stack.worker, stack.beat):
        if process is not None:
            tail = "\n    ".join(process.text().splitlines()[-40:])
            lines.append(f"--- {process.name} log, last lines:\n    {tail}")
    return "\n".join(lines)


@dataclass
class Scenario:
    name: str
    workflows: list[int] = field(default_factory=list)
    faults: int = 0
    settle_seconds: float = 0.0
    bound_seconds: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict)


def baseline(stack: Stack, rng: random.Random, n: int) -> Scenario:
    s = Scenario("baseline")
    began = time.monotonic()
    s.workflows = [start_workflow(stack, stack.seed, f"base{i}")[0] for i in range(n)]
    s.settle_seconds = wait_settled(stack, s.workflows, began)
    s.bound_seconds = SETTLE_TIMEOUT
    return s


def sigkill(stack: Stack, rng: random.Random, n: int, kills: int, bound: Bound) -> Scenario:
    """Two new workflows before each kill, so that every kill finds live ones; the rest after."""
    s = Scenario("sigkill", faults=kills)
    restarts: list[float] = []
    live: list[int] = []
    for k in range(kills):
        for i in range(2):
            s.workflows.append(start_workflow(stack, stack.seed, f"kill{k}-{i}")[0])
        time.sleep(rng.uniform(0.2, 1.0))
        live.append(len(orm(unsettled, s.workflows)))
        stack.worker.kill()  # SIGKILL to the group: main process and every pool child
        time.sleep(rng.uniform(0.0, 1.0))
        restarts.append(stack.start_worker())
    for i in range(n - len(s.workflows)):
        s.workflows.append(start_workflow(stack, stack.seed, f"kill-rest-{i}")[0])
    last_fault = time.monotonic()
    s.settle_seconds = wait_settled(stack, s.workflows, last_fault)
    s.bound_seconds = bound(live[-1] + n - 2 * kills if live else n)
    s.notes = {
        "live_at_each_kill": live,
        "slowest_worker_restart_seconds": round(max(restarts, default=0), 1),
    }
    return s


def postgres_restart(stack: Stack, rng: random.Random, n: int, bound: Bound) -> Scenario:
    s = Scenario("postgres", faults=1)
    s.workflows = [start_workflow(stack, stack.seed, f"pg{i}")[0] for i in range(n)]
    time.sleep(rng.uniform(0.2, 0.8))
    live = len(orm(unsettled, s.workflows))
    began = time.monotonic()
    stack.postgres.stop("fast")  # every connection cut, every open transaction rolled back
    time.sleep(rng.uniform(1.0, 3.0))  # down for a moment, as a restart in production is
    stack.postgres.start()
    s.notes = {"live_at_fault": live, "down_seconds": round(time.monotonic() - began, 1)}
    last_fault = time.monotonic()
    s.settle_seconds = wait_settled(stack, s.workflows, last_fault)
    s.bound_seconds = bound(live)
    return s


def redis_restart(stack: Stack, rng: random.Random, n: int, bound: Bound) -> Scenario:
    s = Scenario("redis", faults=1)
    s.workflows = [start_workflow(stack, stack.seed, f"redis{i}")[0] for i in range(n)]
    time.sleep(rng.uniform(0.2, 0.8))
    live = len(orm(unsettled, s.workflows))
    queued = stack.queued_messages()
    stack.redis.restart()  # SIGKILL, then an empty server on the same port
    s.notes = {"live_at_fault": live, "messages_lost": queued}
    last_fault = time.monotonic()
    s.settle_seconds = wait_settled(stack, s.workflows, last_fault)
    s.bound_seconds = bound(live)
    return s


def broker_outage(stack: Stack, rng: random.Random, n: int, bound: Bound) -> Scenario:
    s = Scenario("broker", faults=1)
    stack.redis.kill()
    statuses: list[int] = []
    latencies: list[float] = []
    same_on_retry = 0
    try:
        for i in range(n):
            key = f"outage{i}"
            wf, took, status = start_workflow(stack, stack.seed, key)
            s.workflows.append(wf)
            latencies.append(took)
            statuses.append(status)
            again, _, _ = start_workflow(stack, stack.seed, key)  # the client's retry, same key
            same_on_retry += again == wf
    finally:
        stack.redis.start()
    last_fault = time.monotonic()
    s.settle_seconds = wait_settled(stack, s.workflows, last_fault)
    s.bound_seconds = bound(len(s.workflows))
    s.notes = {
        "posts": len(statuses),
        "posts_answered_201_at_once": statuses.count(201),
        "slowest_post_seconds": round(max(latencies, default=0), 2),
        "retries_answered_same_workflow": same_on_retry,
    }
    return s


def executions(calls_log: Path) -> dict[int, dict[int, set[int]]]:
    """{run id: {delivery: {pids that called the source for it}}} from the provider's log."""
    found: dict[int, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    if calls_log.exists():
        for line in calls_log.read_text().splitlines():
            if line.strip():
                call = json.loads(line)
                if call.get("run"):
                    found[call["run"]][call["delivery"]].add(call["pid"])
    return found


def invariants(stack: Stack, reporter: Reporter, scenarios: list[Scenario]) -> dict[str, Any]:
    from django.db.models import Count
    from django.utils import timezone

    from insights.stats import all_time_counts, refresh_rollups
    from orchestrator.models import OutboxMessage, Run, Workflow

    ids = [wf for s in scenarios for wf in s.workflows]
    runs = {r.pk: r for r in Run.objects.filter(workflow__in=ids)}
    over = 0
    for run_id, deliveries in executions(stack.var / "calls.jsonl").items():
        run = runs.get(run_id)
        if run is None:
            continue
        twice = any(len(pids) > 1 for pids in deliveries.values())
        if twice or max(deliveries) > run.deliveries or len(deliveries) > run.deliveries:
            over += 1
    stored = set(Run.objects.filter(pk__in=reporter.accepted.values()).values_list("pk", flat=True))
    per_key = Counter(
        Run.objects.filter(agent="chaos-reporter").values_list("idempotency_key", flat=True)
    )
    wf_keys = Workflow.objects.exclude(idempotency_key="").values("idempotency_key")
    refresh_rollups(timezone.now() - timedelta(hours=48))
    tiles = {key: totals["count"] for key, totals in all_time_counts().items() if totals["count"]}
    raw = {
        (row["status"], row["failure_type"] or "", row["source"]): row["n"]
        for row in Run.objects.values("status", "failure_type", "source").annotate(n=Count("id"))
    }
    statuses = Counter(Workflow.objects.filter(pk__in=ids).values_list("status", flat=True))
    now = timezone.now()
    return {
        "workflows": len(ids),
        "workflow_statuses": dict(statuses),
        "unsettled_workflows": len(unsettled(ids)),
        "runs": len(runs),
        "runs_left_running": Run.objects.filter(status=Run.Status.RUNNING).count(),
        "runs_left_queued": Run.objects.filter(workflow__in=ids, status=Run.Status.QUEUED).count(),
        "runs_executed_beyond_deliveries": over,
        "runs_delivered_more_than_once": sum(r.deliveries > 1 for r in runs.values()),
        "runs_parked": sum(r.exception_type == "WorkerLostError" for r in runs.values()),
        "reports_accepted": len(reporter.accepted),
        "reports_resent_after_an_error": reporter.resent,
        "accepted_reports_lost": len(set(reporter.accepted.values()) - stored),
        "duplicate_runs_per_key": sum(n - 1 for n in per_key.values()),
        "duplicate_workflows_per_key": wf_keys.annotate(n=Count("id")).filter(n__gt=1).count(),
        "tile_groups": len(raw),
        "tile_counts_unequal_to_raw": sum(tiles.get(k, 0) != n for k, n in raw.items())
        + len(set(tiles) - set(raw)),
        "outbox_messages_left": OutboxMessage.objects.filter(available_at__lte=now).count(),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    var = Path(tempfile.mkdtemp(prefix="failsight-chaos-"))
    load_before = os.getloadavg()
    began = time.monotonic()
    stack = build_stack(var)
    stack.seed = args.seed
    reporter: Reporter | None = None
    thread: threading.Thread | None = None
    try:
        use_database(stack)
        stack.start()
        log(f"private servers, web, worker and beat up in {time.monotonic() - began:.0f} s")
        reporter = Reporter(stack.base_url, stack.token)
        thread = threading.Thread(target=reporter.run, daemon=True)
        thread.start()
        wanted = args.scenarios.split(",")
        per = max(2, args.workflows // 4)
        scenarios = [baseline(stack, rng, per)]
        log(f"baseline: {per} workflows settled in {scenarios[0].settle_seconds:.1f} s")
        pace = scenarios[0].settle_seconds / per  # seconds of work per workflow, no fault

        def bound(live: int) -> float:
            # A lost step waits for a nudge and the runs it then sends may be lost too: two
            # windows after the lease, a sweep each, an outbox resend, and twice the fault-free
            # time of the work.
            return LEASE + 2 * WINDOW + 2 * SWEEP + RESEND + 2 * pace * max(live, per)

        steps = {
            "sigkill": lambda: sigkill(stack, rng, max(per, 2 * args.kills), args.kills, bound),
            "postgres": lambda: postgres_restart(stack, rng, per, bound),
            "redis": lambda: redis_restart(stack, rng, per, bound),
            "broker": lambda: broker_outage(stack, rng, per, bound),
        }
        for name in wanted:
            scenario = steps[name]()
            scenarios.append(scenario)
            log(
                f"{name}: {len(scenario.workflows)} workflows settled "
                f"{scenario.settle_seconds:.1f} s after the last fault {scenario.notes or ''}"
            )
        reporter.stop.set()
        thread.join(timeout=30)
        figures = orm(invariants, stack, reporter, scenarios)
    finally:
        if reporter is not None:
            reporter.stop.set()
        stack.stop()
        stack.redis.remove()
        stack.postgres.remove()
        if not args.keep:
            shutil.rmtree(var, ignore_errors=True)
    return {
        "seed": args.seed,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "lease_seconds": LEASE,
        "window_seconds": WINDOW,
        "sweep_seconds": SWEEP,
        "scenarios": {s.name: s.__dict__ | {"workflows": len(s.workflows)} for s in scenarios},
        "invariants": figures,
    }


def loads(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def report(result: dict[str, Any]) -> None:
    scenarios = result["scenarios"]
    base = scenarios["baseline"]["settle_seconds"]
    log("")
    log(
        f"chaos, seed {result['seed']}: lease {result['lease_seconds']} s, lost-dispatch and "
        f"nudge windows {result['window_seconds']} s, a sweep every {result['sweep_seconds']} s"
    )
    log(
        f"load average (1, 5, 15 min) before: {loads(result['load_before'])}; "
        f"after: {loads(result['load_after'])}"
    )
    log(
        f"{'scenario':<10}{'faults':>8}{'workflows':>11}{'settled after last fault':>27}"
        f"{'bound':>8}{'vs baseline':>13}"
    )
    for name, s in scenarios.items():
        ratio = s["settle_seconds"] / base if base else 0
        log(
            f"{name:<10}{s['faults']:>8}{s['workflows']:>11}{s['settle_seconds']:>25.1f} s"
            f"{s['bound_seconds']:>6.0f} s{ratio:>12.1f}x"
        )
        if s["notes"]:
            log(f"{'':<10}{s['notes']}")
    figures = result["invariants"]
    for title, names in (("invariants (each must be 0):", ZERO), ("context:", CONTEXT)):
        log(title)
        for name in names:
            log(f"  {name.replace('_', ' '):<36}{figures[name]:>8}")
    log(f"  workflow statuses: {figures['workflow_statuses']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=40, help="workflows in all (default 40)")
    parser.add_argument("--kills", type=int, default=20, help="worker SIGKILLs (default 20)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--scenarios", default="sigkill,postgres,redis,broker", help="comma-separated, in order"
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the logs folder")
    args = parser.parse_args()
    result = run(args)
    report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    raise SystemExit(int(any(result["invariants"][name] for name in ZERO)))


if __name__ == "__main__":
    main()
