"""The Procfile's processes together, as docs/deployment.md's "Scaling out" runs them:
PostgreSQL, Redis, one `web` (the web server as shipped), TWO `worker`s and one `beat`.

The commands come from the Procfile itself; each line runs through `bash -c` with the environment
set, as a Procfile runner does, so its `${VAR:-default}` forms expand as they do in production.
`release` runs first (migrating an empty scratch database). The processes start once for this
module, each in a session of its own, and their process groups are killed afterwards. The demo
provider logs every call with the pid of the worker child that made it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection, connections

from orchestrator.coordination import workflow
from orchestrator.models import ApiToken, Run, Workflow
from tests.api.helpers import ENVELOPE_KEYS, ok_run
from tests.conftest import require_service
from tests.orchestrator.test_worker import (
    app_sending_to,
    database_url,
    redis_available,
    redis_url,
    wait_for,
    worker_env,
)
from tests.services import free_port, procfile

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
STOP_TIMEOUT = 15  # seconds between SIGTERM and SIGKILL


def stat_of(pid: int) -> tuple[str, int, int]:
    """Return (state, parent pid, process group) of a live process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return fields[0], int(fields[1]), int(fields[2])


def members_of(groups: set[int]) -> list[int]:
    """Return the live (not zombie) processes in any of these process groups."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                state, _, group = stat_of(int(entry.name))
                if group in groups and state != "Z":
                    found.append(int(entry.name))
    return found


@dataclass
class Process:
    """One Procfile process, running in a session (and process group) of its own."""

    name: str
    proc: subprocess.Popen
    log: Path

    @classmethod
    def start(cls, name: str, command: str, env: dict[str, str], log: Path) -> Process:
        with log.open("ab") as out:
            proc = subprocess.Popen(
                ["bash", "-c", command],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return cls(name, proc, log)

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            pytest.fail(f"{self.name} exited with {self.proc.returncode}\n{self.text()[-3000:]}")
        return True


@dataclass
class Stack:
    """The running processes; `tail` is what `wait_for` prints when it times out."""

    processes: list[Process]
    calls_log: Path
    base_url: str = ""

    def named(self, name: str) -> Process:
        return next(p for p in self.processes if p.name == name)

    @property
    def web(self) -> Process:
        return self.named("web")

    @property
    def beat(self) -> Process:
        return self.named("beat")

    @property
    def workers(self) -> list[Process]:
        return [p for p in self.processes if p.name.startswith("worker")]

    def calls(self) -> list[dict[str, Any]]:
        if not self.calls_log.exists():
            return []
        return [json.loads(x) for x in self.calls_log.read_text().splitlines() if x.strip()]

    def tail(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.text()[-2500:]}" for p in self.processes)


def stop(processes: list[Process]) -> None:
    """SIGTERM every process group, SIGKILL what is left after STOP_TIMEOUT; leave no orphan."""
    groups = {p.proc.pid for p in processes}  # start_new_session: the leader's pid is the group
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    for p in processes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    for group in groups:  # also reaches children whose leader has already exited
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    for p in processes:
        p.proc.wait(timeout=10)
    wait_for(lambda: not members_of(groups), 10, "every process of the stack to exit")


@pytest.fixture(scope="module")
def stack(django_db_setup, tmp_path_factory) -> Iterator[Stack]:
    require_service(connection.vendor == "postgresql", "PostgreSQL")
    url = redis_url()
    require_service(redis_available(url), f"Redis at {url}")
    var = tmp_path_factory.mktemp("scale-out")
    queue = f"failsight-scale-{uuid.uuid4().hex[:8]}"
    env = worker_env(url, queue, var) | {
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "DEBUG": "0",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "CELERY_CONCURRENCY": "1",
        "BIND": f"127.0.0.1:{free_port()}",
        "WEB_CONCURRENCY": "1",
    }
    commands = procfile()
    # `release` migrates a database of its own: run on the (already migrated) test database after
    # an earlier transactional test flushed it, its post-migrate hooks would re-create the
    # content types that serialized_rollback restores, and every test here would collide.
    with scratch_database(database_url()) as release_url:
        release = subprocess.run(
            ["bash", "-c", commands["release"]],
            cwd=ROOT,
            env=env | {"DATABASE_URL": release_url},
            capture_output=True,
            text=True,
            timeout=180,
        )
    assert release.returncode == 0, release.stdout + release.stderr
    assert "Applying orchestrator.0001_initial" in release.stdout  # it migrated the empty database

    stack = Stack(processes=[], calls_log=var / "calls.jsonl")
    try:
        with app_sending_to(url, queue):
            stack.processes.append(Process.start("web", commands["web"], env, var / "web.log"))
            for name in ("worker-alpha", "worker-bravo"):  # one name each, as on two machines
                named_env = env | {"CELERY_WORKER_NAME": name}
                log = var / f"{name}.log"
                stack.processes.append(Process.start(name, commands["worker"], named_env, log))
            stack.processes.append(Process.start("beat", commands["beat"], env, var / "beat.log"))

            stack.base_url = "http://" + env["BIND"]
            for worker in stack.workers:
                wait_for(logged(worker, "ready."), 90, f"{worker.name} to be ready", stack)
            wait_for(logged(stack.beat, "beat: Starting"), 60, "beat to start", stack)
            wait_for(lambda: answers(stack.base_url), 60, "the web server to answer", stack)
            yield stack
    finally:
        stop(stack.processes)
        connections.close_all()


@contextlib.contextmanager
def scratch_database(url: str) -> Iterator[str]:
    """An empty PostgreSQL database beside the test database, dropped afterwards."""
    import psycopg

    base, _, name = url.rpartition("/")
    scratch = f"{name}_release"
    with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{scratch}"')
        admin.execute(f'CREATE DATABASE "{scratch}"')
    try:
        yield f"{base}/{scratch}"
    finally:
        with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')


def logged(process: Process, marker: str) -> Callable[[], bool]:
    return lambda: process.alive() and marker in process.text()


def answers(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/api/v1/policies", timeout=5).status_code == 401
    except httpx.HTTPError:
        return False


def start(
    topics: list[str], faults: dict[str, Any], capability: str = "news", breadth: int = 1
) -> Workflow:
    return workflow.start_workflow(
        "AI impact", topics, capability, breadth=breadth, input={"faults": faults}
    )


def wait_finished(stack: Stack, workflows: list[Workflow], timeout: float) -> None:
    def finished() -> bool:
        return all(p.alive() for p in stack.processes) and not Workflow.objects.filter(
            pk__in=[wf.pk for wf in workflows]
        ).exclude(status__in=Workflow.FINISHED)

    wait_for(finished, timeout, "the workflows to finish", stack)
    for wf in workflows:
        wf.refresh_from_db()


def assert_each_attempt_ran_once(stack: Stack, workflows: list[Workflow]) -> None:
    """Every run was delivered once, and the provider saw exactly the calls the run recorded."""
    topics = _topics(workflows)  # unique per workflow: the call log has no workflow id
    seen = Counter(
        (c["topic"], c["source"], c["attempt"]) for c in stack.calls() if c["topic"] in topics
    )
    runs = Run.objects.filter(workflow__in=workflows)
    assert seen == {(r.topic, r.source, r.attempt): r.calls for r in runs}
    assert {r.deliveries for r in runs} == {1}


def _topics(workflows: list[Workflow]) -> set[str]:
    return {t for wf in workflows for t in wf.topics}


def test_the_web_process_serves_the_api_as_shipped(stack):
    token, secret = ApiToken.issue_audited("scale-out-agent", note="scale-out test")
    bearer = {"Authorization": f"Bearer {secret}"}
    with httpx.Client(base_url=stack.base_url, timeout=10) as http:
        created = http.post("/api/v1/runs", json=ok_run(topic="film"), headers=bearer)
        assert created.status_code == 201, created.text
        run = created.json()
        fetched = http.get(f"/api/v1/runs/{run['id']}", headers=bearer)
        refused = http.get(f"/api/v1/runs/{run['id']}")

    assert fetched.status_code == 200
    assert fetched.json() == run
    assert (
        Run.objects.get(pk=run["id"]).token == token
    )  # written by the web server into the test DB
    assert refused.status_code == 401
    assert refused.headers["Content-Type"].startswith("application/json")
    body = refused.json()
    assert set(body) == ENVELOPE_KEYS
    assert body["failure_type"] == "auth_failure"
    access = stack.web.text()
    assert '"POST /api/v1/runs HTTP/1.1" 201' in access
    assert f'"GET /api/v1/runs/{run["id"]} HTTP/1.1" 401' in access


def test_two_workers_share_the_workflows_and_run_each_attempt_once(stack):
    slow = "sleep:0.5:ok:2"  # keeps one worker busy, so the other takes the next task
    cases = [
        (
            start(
                ["a-film", "a-music"],
                {
                    f"{s}:{t}": slow
                    for s in ("news_api", "news_wire")
                    for t in ("a-film", "a-music")
                },
                breadth=2,
            ),
            Workflow.Status.SUCCEEDED,
            {"a-film": "well_supported", "a-music": "well_supported"},
        ),
        (
            start(
                ["b-film"],
                {
                    "news_api:b-film": slow,
                    "news_wire:b-film": "missing",
                    "news_archive:b-film": slow,
                },
                breadth=2,
            ),
            Workflow.Status.SUCCEEDED,  # the missing source was replaced by the next one
            {"b-film": "well_supported"},
        ),
        (
            start(
                ["c-games"], {"news_api:c-games": "missing", "news_wire:c-games": "sleep:0.5:empty"}
            ),
            Workflow.Status.DEGRADED,  # an empty answer that a failure may explain
            {"c-games": "empty"},
        ),
        (
            start(["d-books"], {"news_api:d-books": "sleep:0.5:ok:3"}),
            Workflow.Status.SUCCEEDED,
            {"d-books": "thin"},
        ),
    ]
    workflows = [wf for wf, _, _ in cases]
    wait_finished(stack, workflows, 45)

    for wf, status, verdicts in cases:
        assert wf.status == status, (wf.topics, wf.coverage_summary)
        assert {t: e["verdict"] for t, e in wf.coverage.items()} == verdicts
    assert "resource_missing" in workflows[2].coverage["c-games"]["why"]
    assert_each_attempt_ran_once(stack, workflows)

    # Every call came from a child of a worker's main process, and both workers took a share.
    groups = {w.proc.pid: w.name for w in stack.workers}  # start_new_session: pid == group
    parents = {}
    for pid in {c["pid"] for c in stack.calls() if c["topic"] in _topics(workflows)}:
        _, parent, group = stat_of(pid)
        assert group in groups and parent != pid
        assert "worker" in Path(f"/proc/{parent}/cmdline").read_text()
        parents[parent] = groups[group]
    assert sorted(parents.values()) == ["worker-alpha", "worker-bravo"]


def test_one_beat_sweeps_the_due_retries_and_each_attempt_runs_once(stack):
    plan = ["timeout", "timeout", "ok:2"]  # two failed attempts, each retried after a delay
    workflows = [
        start(["e-ai"], {"scholar_api:e-ai": plan}, capability="scholar"),
        start(["f-ai"], {"web_search:f-ai": plan}, capability="web"),
    ]
    wait_finished(stack, workflows, 45)

    for wf in workflows:
        assert wf.status == Workflow.Status.SUCCEEDED, wf.coverage_summary
        runs = list(wf.runs.order_by("attempt"))
        assert [(r.attempt, r.status, r.decision) for r in runs] == [
            (1, "failed", "retry"),
            (2, "failed", "retry"),
            (3, "succeeded", ""),
        ]
        assert [r.calls for r in runs] == [3, 3, 1]  # local retries of a timeout, then the call
        for failed, retry in pairwise(runs):
            assert retry.due_at > failed.finished_at  # it waited in the database, not the broker
            assert retry.dispatched_at >= retry.due_at
    assert_each_attempt_ran_once(stack, workflows)

    # Only the beat process schedules: the workers embed none, and received no more sweeps than
    # it sent. A retry waits in the database until its due time; with nothing else left to run in
    # its workflow, only a sweep can dispatch it, and the sweeps report what they sent.
    logs = "".join(w.text() for w in stack.workers)
    sent = stack.beat.text().count("Sending due task sweep-due-runs")  # read after the workers'
    assert "beat: Starting" not in logs
    received = len(re.findall(r"orchestrator\.tasks\.sweep\[[^\]]+\] received", logs))
    assert 0 < received <= sent
    dispatched = re.findall(r"orchestrator\.tasks\.sweep\[[^\]]+\] succeeded in \S+: (\d+)", logs)
    assert sum(map(int, dispatched)) >= 1
