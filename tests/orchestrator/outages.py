"""Ten broker outages of 10-12 s under load, shared by the Redis and the RabbitMQ modules (each
its own module, so that CI's parallel step can run them side by side).

The Procfile's worker and beat run on a private broker and the test database while this process
starts a workflow every LOAD_EVERY seconds through the outbox (the one place tasks are sent).
Before each outage two workflows whose run takes a second are executing, so the outage cuts
both pool processes' tasks mid-way and their acknowledgements meet a broker that is gone: the
case that left a Redis worker alive and consuming nothing. Every workflow must settle within
SETTLE_SECONDS of the last outage's end, none lost, none run twice, the worker never restarted.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import connection, connections
from django.db.models import Count

from config.celery import app
from orchestrator.coordination import workflow
from orchestrator.liveness import PULSE_RECORD_SECONDS
from orchestrator.models import Run, WorkerPulse, Workflow
from tests.conftest import TEST_SOURCES
from tests.services import Process, app_env, procfile, wait_until

OUTAGES = 10
DOWN_SECONDS = (10.0, 12.0)
UP_SECONDS = 3.0
LOAD_EVERY = 1.5
SETTLE_SECONDS = 60
SEED = 7


class PrivateDispatcher:
    """Sends each task on a connection of its own to the private broker: a connection pooled
    before an outage would be a dead one after it."""

    def __init__(self, url: str) -> None:
        self.url = url

    def send(self, task: str, args: list[Any]) -> None:
        with app.connection_for_write(self.url) as conn, conn.Producer() as producer:
            app.send_task(task, args=args, producer=producer, retry=False)


def database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@contextmanager
def processes(broker_url: str, tmp_path: Path, **extra: str) -> Iterator[tuple[Process, Process]]:
    """The Procfile's worker and beat on `broker_url` and the test database, once the worker
    is ready. Runs sent and lost with a broker's memory are sent again after RUN_LEASE_SECONDS."""
    env = app_env(database_url(), broker_url, "", tmp_path) | {
        "DATABASE_POOL": "0",
        "CELERY_TASK_DEFAULT_QUEUE": app.conf.task_default_queue,
        "FAILSIGHT_SOURCE_MODULES": TEST_SOURCES,
        "FAILSIGHT_DEMO_CALL_LOG": str(tmp_path / "calls.jsonl"),
        "RUN_LEASE_SECONDS": "10",
        "LOG_LEVEL": "INFO",
        **extra,
    }
    worker = Process("worker", procfile()["worker"], env, tmp_path / "worker.log").start()
    beat = Process("beat", procfile()["beat"], env, tmp_path / "beat.log").start()
    try:
        wait_until(lambda: "ready." in worker.text(), 90, "the worker to be ready")
        yield worker, beat
    finally:
        beat.stop()
        worker.stop()
        connections.close_all()


def in_flight(calls_log: Path) -> set[str]:
    if not calls_log.exists():
        return set()
    lines = calls_log.read_text().splitlines()
    return {json.loads(line).get("topic", "") for line in lines if line.strip()}


@dataclass
class Load:
    calls_log: Path
    started: list[int] = field(default_factory=list)
    next_at: float = 0.0

    def start(self, topic: str, seconds: int = 1) -> None:
        faults = {f"news_api:{topic}": f"sleep:{seconds}:ok:1"}
        wf = workflow.start_workflow("outage load", [topic], "news", input={"faults": faults})
        self.started.append(wf.pk)

    def keep_up(self, until: float) -> None:
        """Start a workflow every LOAD_EVERY seconds until `until` (monotonic)."""
        while (now := time.monotonic()) < until:
            if now >= self.next_at:
                self.next_at = now + LOAD_EVERY
                self.start(f"load{len(self.started)}")
            time.sleep(0.1)

    def busy_both(self, outage: int) -> None:
        """Return once two two-second runs execute: both pool processes hold a task."""
        topics = [f"busy{outage}a", f"busy{outage}b"]
        for topic in topics:
            self.start(topic, seconds=2)
        wait_until(lambda: set(topics) <= in_flight(self.calls_log), 60, "both runs to start")


@dataclass
class Outcome:
    settle_seconds: float
    last_up_at: float  # epoch seconds
    workflows: int
    statuses: dict[str, int]
    duplicated: int


def settled(ids: list[int]) -> bool:
    return not Workflow.objects.filter(pk__in=ids).exclude(status__in=Workflow.FINISHED).exists()


def ten_outages(
    down: Callable[[], None], up: Callable[[], None], worker: Process, tmp_path: Path
) -> Outcome:
    """Run the outages under load (`down()` and `up()` cut and restore the broker; work is
    sent through `PrivateDispatcher`) and wait for every workflow to settle."""
    rng = random.Random(SEED)
    load = Load(tmp_path / "calls.jsonl")
    for outage in range(OUTAGES):
        load.busy_both(outage)
        # Counted from the moment the broker starts going down, until it has started again.
        began = time.monotonic()
        down()
        load.keep_up(began + rng.uniform(*DOWN_SECONDS))
        up()
        load.keep_up(time.monotonic() + UP_SECONDS)
        assert worker.proc.poll() is None, f"the worker exited:\n{worker.text()[-6000:]}"
    last_up, last_up_at = time.monotonic(), time.time()
    try:
        wait_until(lambda: settled(load.started), SETTLE_SECONDS, "every workflow to settle")
    finally:
        settle = time.monotonic() - last_up
    runs = Run.objects.filter(workflow_id__in=load.started, status=Run.Status.SUCCEEDED)
    twice = runs.values("workflow_id", "topic").annotate(n=Count("id")).filter(n__gt=1)
    statuses = Workflow.objects.filter(pk__in=load.started).values_list("status", flat=True)
    counts: dict[str, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return Outcome(settle, last_up_at, len(load.started), counts, twice.count())


def assert_consumed_after_the_outages(worker: Process, outcome: Outcome) -> None:
    """The worker was never replaced, and its pulse moved after the last outage (it is written
    at most every PULSE_RECORD_SECONDS, while beat sends it a task every second)."""
    assert worker.proc.poll() is None

    def pulse_moved() -> bool:
        pulse = WorkerPulse.objects.get(worker__startswith="worker@")
        return pulse.received_at.timestamp() > outcome.last_up_at

    wait_until(pulse_moved, 3 * PULSE_RECORD_SECONDS, "the worker's pulse after the outages")
    assert outcome.duplicated == 0
    assert outcome.statuses == {Workflow.Status.SUCCEEDED: outcome.workflows}, outcome
