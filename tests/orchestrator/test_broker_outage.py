"""A broker outage under a real worker: a private Redis is killed and started again ten times while
the Procfile's worker runs tasks (acks_late) on the test database; the worker must outlive every
outage and take the work sent after each one.

The Redis server is private (a free port, removed afterwards): the machine's shared one is never
stopped. Work is started in this process and sent to the private Redis through the outbox's
dispatcher, the one place tasks are sent.
"""

from __future__ import annotations

import json
import shutil
import socket
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from django.db import connections
from kombu import Connection

from config.celery import app
from orchestrator import workers
from orchestrator.coordination import dispatch, workflow
from orchestrator.models import Workflow
from tests.conftest import TEST_SOURCES, require_service
from tests.orchestrator.outages import PrivateDispatcher, database_url
from tests.services import PrivateRedis, Process, app_env, procfile, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(240),
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

OUTAGES = 10


@pytest.fixture
def redis(postgres) -> Iterator[PrivateRedis]:
    require_service(shutil.which("redis-server") is not None, "redis-server")
    server = PrivateRedis().start()
    try:
        yield server
    finally:
        server.remove()


@pytest.fixture
def worker(redis, tmp_path, monkeypatch) -> Iterator[Process]:
    """The Procfile's worker on the private Redis and the test database."""
    env = app_env(database_url(), redis.url(0), redis.url(1), tmp_path) | {
        "DATABASE_POOL": "0",
        "CELERY_TASK_DEFAULT_QUEUE": app.conf.task_default_queue,
        "CELERY_VISIBILITY_TIMEOUT": "10",
        "FAILSIGHT_SOURCE_MODULES": TEST_SOURCES,
        "FAILSIGHT_DEMO_CALL_LOG": str(tmp_path / "calls.jsonl"),
        "LOG_LEVEL": "INFO",
    }
    process = Process("worker", procfile()["worker"], env, tmp_path / "worker.log").start()
    monkeypatch.setattr(dispatch, "dispatcher", PrivateDispatcher(redis.url(0)))
    try:
        wait_until(lambda: "ready." in process.text(), 90, "the worker to be ready")
        yield process
    finally:
        process.stop()
        connections.close_all()


def calls(log: Path, topic: str) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    found = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [c for c in found if c.get("topic") == topic]


def start_in_flight(calls_log: Path, topic: str) -> None:
    """Start a workflow whose run takes a second and return once that run is executing: its
    message is delivered and not yet acknowledged (acks_late)."""
    faults = {f"news_api:{topic}": "sleep:1:ok:1"}
    workflow.start_workflow("in flight", [topic], "news", input={"faults": faults})
    wait_until(lambda: calls(calls_log, topic), 60, f"the run of {topic} to start")


def finished(wf: Workflow, worker: Process) -> bool:
    assert worker.proc.poll() is None, f"the worker exited:\n{worker.text()[-6000:]}"
    wf.refresh_from_db()
    return wf.status in Workflow.FINISHED


def test_the_worker_outlives_ten_broker_outages_and_takes_the_work_sent_after_each(
    redis, worker, tmp_path
):
    for outage in range(OUTAGES):
        start_in_flight(tmp_path / "calls.jsonl", f"busy{outage}")
        redis.kill()
        time.sleep(0.5)
        redis.start()

        wf = workflow.start_workflow("after the outage", [f"after{outage}"], "news")
        wait_until(partial(finished, wf, worker), 60, f"the work sent after outage {outage}")
        assert wf.status == Workflow.Status.SUCCEEDED
    assert worker.proc.poll() is None
    assert "Unrecoverable error" not in worker.text()
    # Its heartbeats (the System page's) came back with the broker too.
    with Connection(redis.url(0)) as conn:
        assert f"worker@{socket.gethostname()}" in workers.listen(conn)
