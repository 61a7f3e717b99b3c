"""The coordinator with a REAL Celery worker process on Redis and PostgreSQL (no eager mode).

Each test starts `celery -A config worker -B --pool=prefork -c 1` on a queue of its own, pointed at
the test database and at Redis, and kills it afterwards. The demonstration provider appends every
call (with the worker child's pid and a timestamp) to a log file the tests read.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections
from kombu import pools as kombu_pools

from config.celery import app
from orchestrator.coordination import dispatch, workflow
from orchestrator.coordination.actions import do_resolve_review
from orchestrator.models import AuditEntry, ReviewItem, Run, Workflow
from orchestrator.vocabulary import Channel
from tests.conftest import TEST_SOURCES, require_service

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

ROOT = Path(__file__).resolve().parents[2]
CELERY = ROOT / ".venv" / "bin" / "celery"
LOCAL_REDIS = "redis://127.0.0.1:6379/3"
SESSION_QUEUE = f"failsight-test-{uuid.uuid4().hex[:8]}"
VISIBILITY_TIMEOUT = 10  # the settings' minimum; an unacked task comes back after this


def redis_url() -> str:
    url = os.environ.get("CELERY_BROKER_URL", "")
    return url if url.startswith("redis://") else LOCAL_REDIS


def redis_available(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def database_url() -> str:
    s = connection.settings_dict
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"


@contextlib.contextmanager
def app_sending_to(url: str, queue: str) -> Iterator[None]:
    """Point this process's Celery app (it enqueues after commit) at the test broker and queue."""
    saved = {k: app.conf[k] for k in ("broker_url", "broker_transport", "task_default_queue")}
    saved["broker_transport_options"] = dict(app.conf.broker_transport_options or {})

    def reset() -> None:
        kombu_pools.reset()  # producers are pooled per connection, process-wide
        app._pool = None
        app.__dict__.pop("amqp", None)  # its queues and router are cached from the old conf

    app.conf.update(
        broker_url=url,
        broker_transport=None,  # the URL's scheme, not the settings' filesystem transport
        task_default_queue=queue,
        broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT},
    )
    # Celery reads the broker from the CELERY_BROKER_URL variable before its configuration.
    saved_env = os.environ.get("CELERY_BROKER_URL")
    os.environ["CELERY_BROKER_URL"] = url
    reset()
    try:
        yield
    finally:
        app.conf.update(saved)
        if saved_env is None:
            os.environ.pop("CELERY_BROKER_URL", None)
        else:
            os.environ["CELERY_BROKER_URL"] = saved_env
        reset()


@dataclass
class Worker:
    env: dict[str, str]
    log: Path
    calls_log: Path
    proc: subprocess.Popen | None = None

    def start(self) -> None:
        cmd = [str(CELERY), "-A", "config", "worker", "-B", "--pool=prefork", "-c", "1"]
        cmd += ["-Q", self.env["CELERY_TASK_DEFAULT_QUEUE"], "--loglevel=INFO", "--without-mingle"]
        cmd += ["--without-gossip", "-n", f"{uuid.uuid4().hex[:6]}@%h"]
        cmd += ["-s", str(self.log.parent / "beat-schedule")]
        ready = self.log.read_text().count("ready.") if self.log.exists() else 0
        out = self.log.open("a")
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(lambda: self.log.read_text().count("ready.") > ready, 60, "the worker", self)

    def kill_all(self) -> None:
        """SIGKILL the main process and every child at once: nothing gets to requeue a task."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=15)
        # Also reaches pool children whose main process has already exited (or was killed).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def calls(self, **match: Any) -> list[dict[str, Any]]:
        if not self.calls_log.exists():
            return []
        lines = [json.loads(x) for x in self.calls_log.read_text().splitlines() if x.strip()]
        return [c for c in lines if all(c.get(k) == v for k, v in match.items())]

    def tail(self) -> str:
        return self.log.read_text()[-4000:] if self.log.exists() else ""


def wait_for(check: Callable[[], Any], timeout: float, what: str, worker: Worker | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(
        f"timed out after {timeout} s waiting for {what}\n{worker.tail() if worker else ''}"
    )


def worker_env(broker_url: str, queue: str, var: Path) -> dict[str, str]:
    """The environment of a worker process on the test database, the broker and a queue of its
    own, whose demo provider logs every call to var/calls.jsonl."""
    return os.environ | {
        "DATABASE_URL": database_url(),
        "DATABASE_POOL": "0",  # a pool's threads do not survive the prefork pool's fork
        "CELERY_BROKER_URL": broker_url,
        "CELERY_TASK_DEFAULT_QUEUE": queue,
        "CELERY_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT),
        "FAILSIGHT_VAR_DIR": str(var),
        "FAILSIGHT_DEMO_CALL_LOG": str(var / "calls.jsonl"),
        "FAILSIGHT_SOURCE_MODULES": TEST_SOURCES,
    }


@pytest.fixture
def worker(request, postgres, tmp_path) -> Iterator[Worker]:
    """A worker process; `@pytest.mark.parametrize("worker", [{VAR: value}], indirect=True)`
    adds settings to its environment."""
    url = redis_url()
    require_service(redis_available(url), f"Redis at {url}")
    queue = f"{SESSION_QUEUE}-{uuid.uuid4().hex[:4]}"
    env = worker_env(url, queue, tmp_path) | getattr(request, "param", {})
    handle = Worker(env=env, log=tmp_path / "worker.log", calls_log=tmp_path / "calls.jsonl")
    with app_sending_to(url, queue):
        handle.start()
        try:
            yield handle
        finally:
            handle.stop()
            connections.close_all()


def start(topics: list[str], faults: dict[str, Any], breadth: int = 1) -> Workflow:
    return workflow.start_workflow(
        "AI impact", topics, "news", breadth=breadth, input={"faults": faults}
    )


def settled(wf: Workflow, *statuses: str) -> Callable[[], bool]:
    def check() -> bool:
        wf.refresh_from_db()
        return wf.status in statuses

    return check


def test_a_workflow_with_mixed_failures_reaches_the_right_state_and_coverage(worker):
    wf = start(
        ["film", "music", "games", "books"],
        {
            "news_api:film": "ok:3",
            "news_wire:film": "ok:2",
            "news_api:music": ["timeout", "ok:2"],
            "news_wire:music": "missing",
            "news_archive:music": "ok:1",
            "news_api:games": "missing",
            "news_wire:games": "invalid",
            "news_archive:games": "empty",
            "news_api:books": "partial:2:invalid",
            "news_wire:books": "ok:4",
        },
        breadth=2,
    )
    wait_for(settled(wf, *Workflow.FINISHED), 90, "the workflow to finish", worker)
    assert wf.status == Workflow.Status.DEGRADED
    verdicts = {t: e["verdict"] for t, e in wf.coverage.items()}
    assert verdicts == {
        "film": "well_supported",
        "music": "well_supported",
        "games": "empty",
        "books": "thin",  # news_wire's results; news_api's partial results are no support
    }
    assert "resource_missing" in wf.coverage["games"]["why"]
    assert wf.coverage["books"]["partial_results"] == 2
    music = wf.runs.filter(topic="music", source="news_api").order_by("attempt")
    assert [r.status for r in music] == ["failed", "succeeded"]
    assert music[0].calls == 3 and music[0].decision == "retry"


def test_a_killed_worker_child_leads_to_redelivery_without_duplicate_runs(worker):
    wf = start(["film"], {"news_api:film": "sleep:4:ok:2"})
    first = wait_for(lambda: worker.calls(topic="film"), 60, "the slow call to start", worker)
    os.kill(first[0]["pid"], signal.SIGKILL)
    wait_for(settled(wf, *Workflow.FINISHED), 90, "the workflow to finish", worker)
    assert wf.status == Workflow.Status.SUCCEEDED
    run = Run.objects.get(workflow=wf)  # exactly one row for the slot
    assert run.deliveries == 2 and run.result_count == 2
    pids = {c["pid"] for c in worker.calls(topic="film")}
    assert len(pids) == 2  # the redelivered task ran in the restarted child


def test_concurrent_review_resolutions_continue_the_workflow_once(worker, operator, policy_editor):
    wf = start(["film"], {"news_api:film": "missing", "news_wire:film": ["auth", "ok:2"]})
    wait_for(settled(wf, Workflow.Status.AWAITING_REVIEW), 60, "the escalation", worker)
    item = ReviewItem.objects.get(workflow=wf)
    barrier = threading.Barrier(4)
    results: list[int] = []

    def resolve(user: Any, resolution: str) -> None:
        try:
            barrier.wait()
            results.append(
                do_resolve_review(
                    ReviewItem.objects.get(pk=item.pk), user, resolution, channel=Channel.DASHBOARD
                )
            )
        finally:
            connections.close_all()

    people = [(operator, "retry"), (policy_editor, "retry"), (operator, "retry")]
    threads = [threading.Thread(target=resolve, args=p) for p in people]
    for t in threads:
        t.start()
    barrier.wait()
    for t in threads:
        t.join()
    assert sorted(results) == [0, 0, 1]
    dispatch.dispatcher.send(dispatch.STEP_TASK, [wf.pk, item.pk])  # a duplicate is harmless
    wait_for(settled(wf, *Workflow.FINISHED), 60, "the workflow to finish", worker)
    assert wf.status == Workflow.Status.SUCCEEDED
    assert Run.objects.filter(retry_of=item.run).count() == 1
    assert AuditEntry.objects.filter(action="review.resolve").count() == 1
    item.refresh_from_db()
    assert item.continued_at is not None


def test_a_provider_answering_429_is_not_called_before_retry_after(worker):
    wf = start(["film"], {"news_api:film": ["rate_limited:2", "ok:2"]})
    wait_for(settled(wf, *Workflow.FINISHED), 60, "the workflow to finish", worker)
    assert wf.status == Workflow.Status.SUCCEEDED
    calls = worker.calls(source="news_api", topic="film")
    assert [c["behaviour"] for c in calls] == ["rate_limited:2", "ok:2"]
    assert calls[1]["t"] - calls[0]["t"] >= 2.0


SHORT_LEASE = {"RUN_LEASE_SECONDS": "3"}  # the lost-dispatch and nudge windows follow it


@pytest.mark.serial  # a 3 s lease renewed by heartbeat: late beats under contention
@pytest.mark.parametrize("worker", [SHORT_LEASE], indirect=True)
def test_a_call_longer_than_the_lease_keeps_it_by_heartbeat_and_runs_once(worker):
    wf = start(["film"], {"news_api:film": "sleep:7:ok:2"})  # more than two lease periods
    wait_for(settled(wf, *Workflow.FINISHED), 60, "the workflow to finish", worker)
    assert wf.status == Workflow.Status.SUCCEEDED
    run = Run.objects.get(workflow=wf)
    assert run.deliveries == 1  # never taken back: the heartbeat renewed the lease
    assert [c["delivery"] for c in worker.calls(topic="film")] == [1]
    assert "lease ran out" not in worker.tail()


# The broker gives an unacknowledged task back only after an hour: within the test's wait, only
# the run's lease (3 s) and the sweeper can recover it.
BROKER_KEEPS_IT = SHORT_LEASE | {"CELERY_VISIBILITY_TIMEOUT": "3600"}


@pytest.mark.serial  # a 3 s lease
@pytest.mark.parametrize("worker", [BROKER_KEEPS_IT], indirect=True)
def test_a_whole_worker_killed_mid_call_costs_one_lease_and_one_more_delivery(worker):
    wf = start(["film"], {"news_api:film": "sleep:2:ok:2"})
    wait_for(lambda: worker.calls(topic="film"), 60, "the call to start", worker)
    worker.kill_all()  # main process and children: the broker keeps the task unacknowledged
    worker.start()
    wait_for(settled(wf, *Workflow.FINISHED), 60, "the workflow to finish", worker)
    assert wf.status == Workflow.Status.SUCCEEDED
    run = Run.objects.get(workflow=wf)
    assert run.deliveries == 2 and run.result_count == 2 and run.lease_until is None
    deliveries = [c["delivery"] for c in worker.calls(topic="film")]
    assert deliveries == [1, 2]  # the dead one and the one that finished, once each
    assert "lease ran out" in worker.log.read_text()  # taken back by the sweeper
