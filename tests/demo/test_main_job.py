"""The main job (`make run` → `manage.py launch`), end to end, as a newcomer runs it.

It runs on the embedded defaults on purpose, even in CI: a fresh SQLite file and kombu's filesystem
broker in a temporary folder, a real Celery worker process, the fault-injecting provider over real
HTTP and the web server. The checks read what the job left behind independently of its own
reporting: the SQLite database with `sqlite3`, and the provider's own request log.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TAXONOMY = {
    "transient",
    "rate_limited",
    "auth_failure",
    "resource_missing",
    "invalid_input",
    "timeout",
    "server_fault",
    "unclassified",
}
# Settings that point a test session at PostgreSQL and Redis: the main job must not see them.
SERVICE_ENV = (
    "DATABASE_URL",
    "CELERY_BROKER_URL",
    "CACHE_URL",
    "CELERY_TASK_DEFAULT_QUEUE",
    "FAILSIGHT_SOURCE_MODULES",
    "FAILSIGHT_DEMO_CALL_LOG",
    "LAUNCH_DURATION",
    "METRICS_TOKEN",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Banner:
    password: str
    token: str
    metrics: str


@dataclass
class Launch:
    var: Path
    port: int
    proc: subprocess.Popen
    lines: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for_line(self, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if m := re.search(pattern, line):
                    return m
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        pytest.fail(f"no line matching {pattern!r}:\n{self.output}\n{self.logs()}")

    def banner(self, timeout: float) -> Banner:
        """What the banner printed, once it has: the admin's password, the API token, the
        METRICS_TOKEN (the password only at the first launch on a folder)."""
        self.wait_for_line(r"Dashboard\s+http://", timeout)
        metrics = self.wait_for_line(r"Metrics\s+\S+\s+\(Authorization: Bearer (\S+)\)", 5)[1]
        password = re.search(r"Log in as\s+admin / (\S+)", self.output)
        token = self.wait_for_line(r"API token\s+(\S+)", 5)[1]
        return Banner(password[1] if password else "", token, metrics)

    def logs(self) -> str:
        parts = []
        for name in ("worker", "web", "provider", "agent"):
            log = self.var / "log" / f"{name}.log"
            if log.exists():
                parts.append(f"--- {name}.log\n" + log.read_text(errors="replace")[-3000:])
        return "\n".join(parts)

    def db(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.var / "db.sqlite3")
        conn.row_factory = sqlite3.Row
        return conn

    def processes(self) -> list[int]:
        """Pids of live processes started for this launch (they carry its var folder)."""
        marker = f"FAILSIGHT_VAR_DIR={self.var}".encode()
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                if marker in (proc / "environ").read_bytes().split(b"\0"):
                    stat = (proc / "stat").read_text()
                    if stat.rsplit(")", 1)[1].split()[0] != "Z":
                        pids.append(int(proc.name))
        return pids


def launch_env(tmp_path: Path, port: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in SERVICE_ENV}
    return (
        env
        | {
            "FAILSIGHT_VAR_DIR": str(tmp_path),
            "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
            "LAUNCH_ADDR": f"127.0.0.1:{port}",
            "PYTHONUNBUFFERED": "1",
        }
        | (extra or {})
    )


def signals_as_in_a_terminal() -> None:  # runs in the child between fork and exec
    """SIGINT and SIGQUIT handled by default, as for a command typed in a terminal. A suite started
    in the background of a script (`cmd &`, nohup) inherits them ignored, make keeps an ignored
    SIGINT ignored, and the test of a SIGINT sent to make would fail on the suite's start."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def launch(
    tmp_path: Path,
    *args: str,
    env: dict[str, str] | None = None,
    cmd: list[str] | None = None,
    preexec_fn: Callable[[], None] = signals_as_in_a_terminal,
) -> Launch:
    """Start `manage.py launch ARGS` (or `cmd`) on the embedded defaults in `tmp_path`."""
    port = free_port()
    env = launch_env(tmp_path, port, env)
    cmd = cmd or [sys.executable, "manage.py", "launch", *args]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=preexec_fn,
    )
    handle = Launch(var=tmp_path, port=port, proc=proc)

    def read() -> None:
        for line in proc.stdout:
            handle.lines.append(line.rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    return handle


def finish(handle: Launch, timeout: float) -> int:
    try:
        return handle.proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        handle.proc.kill()
        pytest.fail(f"the main job did not stop within {timeout} s:\n{handle.output}")


def assert_no_orphans(handle: Launch, within: float = 20) -> None:
    deadline = time.monotonic() + within
    while handle.processes() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert handle.processes() == [], "processes outlived the main job"


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value)


@pytest.fixture(scope="module")
def finished_job(tmp_path_factory) -> tuple[Launch, dict]:
    """One run of the main job for 50 s; what it printed and what was probed while it ran."""
    handle = launch(tmp_path_factory.mktemp("main-job"), "--duration", "50", "--seed", "3")
    probes: dict = {}
    try:
        banner = handle.banner(120)
        token, metrics = banner.token, banner.metrics
        probes["metrics"] = metrics
        probes["children"] = {pid: command_line(pid) for pid in handle.processes()}
        probes["agent_env"] = [
            environment(pid) for pid, cmd in probes["children"].items() if "demo.agent" in cmd
        ]
        with httpx.Client(base_url=handle.base, timeout=10) as web:
            web.get("/accounts/login/")
            login = web.post(
                "/accounts/login/",
                data={
                    "username": "admin",
                    "password": banner.password,
                    "csrfmiddlewaretoken": web.cookies["csrftoken"],
                },
                headers={"Referer": f"{handle.base}/accounts/login/"},
            )
            probes["login"] = login.status_code
            probes["overview"] = web.get("/").status_code
            probes["resolved"] = resolve_back_office_reviews(handle, web)
        probes["api_with_token"] = httpx.get(
            f"{handle.base}/api/v1/runs", headers={"Authorization": f"Bearer {token}"}
        ).status_code
        probes["api_without_token"] = httpx.get(f"{handle.base}/api/v1/runs").status_code
        bearer = {"Authorization": f"Bearer {metrics}"}
        probes["metrics_with_token"] = httpx.get(f"{handle.base}/metrics", headers=bearer)
        probes["metrics_without_token"] = httpx.get(f"{handle.base}/metrics").status_code
        probes["rc"] = finish(handle, 120)
    finally:
        if handle.proc.poll() is None:
            handle.proc.kill()
    return handle, probes


def command_line(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return ""


def environment(pid: int) -> dict[str, str]:
    with contextlib.suppress(OSError):
        raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        return dict(x.decode().partition("=")[::2] for x in raw if b"=" in x)
    return {}


def resolve_back_office_reviews(handle: Launch, web: httpx.Client) -> dict[str, int]:
    """As an operator would: claim and resolve with "retry" the tour's two escalations."""
    wanted = {"payroll", "incidents"}
    found: dict[str, int] = {}
    deadline = time.monotonic() + 40
    while set(found) != wanted and time.monotonic() < deadline:
        with handle.db() as conn:
            rows = conn.execute(
                """SELECT i.id, r.topic FROM orchestrator_reviewitem i
                   JOIN orchestrator_run r ON r.id = i.run_id WHERE i.state = 'open'"""
            ).fetchall()
        found = {topic: pk for pk, topic in rows if topic in wanted}
        time.sleep(0.5)
    headers = {"X-CSRFToken": web.cookies["csrftoken"], "Referer": f"{handle.base}/review/"}
    for pk in found.values():
        claim = web.post(f"/review/{pk}/claim/", headers=headers)
        assert claim.status_code in (200, 302), claim.text[:500]
        answer = web.post(
            f"/review/{pk}/resolve/",
            data={"resolution": "retry", "note": "access granted; try again"},
            headers=headers,
        )
        assert answer.status_code in (200, 302), answer.text[:500]  # the queue, or a redirect to it
    return found


def test_it_prints_credentials_that_work_and_serves_the_dashboard_and_the_api(finished_job):
    handle, probes = finished_job
    assert probes["login"] == 302, "the printed admin password did not log in"
    assert probes["overview"] == 200
    assert probes["api_with_token"] == 200
    assert probes["api_without_token"] == 401
    assert re.search(r"runs \d+ \(ok \d+", handle.output), "no live summary line"
    assert probes["metrics_with_token"].status_code == 200
    assert "failsight_runs_total" in probes["metrics_with_token"].text
    assert probes["metrics_without_token"] != 200


def test_secrets_reach_the_children_in_their_environment_never_on_a_command_line(finished_job):
    _, probes = finished_job
    children = probes["children"]
    assert len(children) >= 5, children  # launcher, provider, worker (+ pool), web, agent
    for cmd in children.values():
        assert "fs_" not in cmd and probes["metrics"] not in cmd and "--token" not in cmd, cmd
    (agent,) = probes["agent_env"]
    assert agent["FAILSIGHT_AGENT_TOKEN"].startswith("fs_")


def test_it_stops_by_itself_cleanly_after_its_duration(finished_job):
    handle, probes = finished_job
    assert probes["rc"] == 0, handle.output + handle.logs()
    assert "Stopped: agent, web server, worker and provider are down." in handle.output
    # The last line: the queue a person has to look at and what the run cost, priced from the
    # demonstration's prices (seeded at launch) and the tokens its answers reported.
    final = handle.output.strip().splitlines()[-1]
    figures = re.search(
        r"^Final: runs \d+ .* open review items (\d+) · spend ([\d,.]+) USD · "
        r"wasted spend ([\d,.]+) USD · time lost [\d.]+ (min|h)$",
        final,
    )
    assert figures, final
    assert float(figures[2].replace(",", "")) > 0, final
    assert "demonstration prices added to the price table" in handle.output
    assert_no_orphans(handle)
    with handle.db() as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_every_failure_type_happened_through_real_http_calls(finished_job):
    handle, _ = finished_job
    with handle.db() as conn:
        seen = {r[0] for r in conn.execute("SELECT DISTINCT failure_type FROM orchestrator_run")}
        details = [r[0] for r in conn.execute("SELECT detail FROM orchestrator_run LIMIT 500")]
    assert seen >= TAXONOMY, f"missing: {TAXONOMY - seen}"
    assert any("HTTPStatusError" in d or "httpx" in d for d in details)
    requests = provider_requests(handle)
    statuses = {r["status"] for r in requests}
    assert {200, 401, 403, 404, 422, 429, 503, 529, 0} <= statuses  # 0: a dropped connection


def provider_requests(handle: Launch) -> list[dict]:
    log = handle.var / "log" / "provider-requests.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def test_retries_honour_retry_after_as_the_provider_saw_them(finished_job):
    handle, _ = finished_job
    by_query: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in provider_requests(handle):
        by_query[(r["source"], r["q"])].append(r)
    honoured = 0
    for calls in by_query.values():
        calls.sort(key=lambda r: r["t"])
        for before, after in itertools.pairwise(calls):
            if before["status"] == 429 and before["retry_after"]:
                waited = after["t"] - before["t"]
                assert waited >= before["retry_after"], (before, after)
                honoured += 1
    assert honoured >= 1, "no rate-limited query was retried"


def test_retry_after_is_honoured_in_the_run_history(finished_job):
    handle, _ = finished_job
    with handle.db() as conn:
        pairs = conn.execute(
            """SELECT f.finished_at, f.retry_after, n.started_at FROM orchestrator_run f
               JOIN orchestrator_run n ON n.retry_of_id = COALESCE(f.retry_of_id, f.id)
                                      AND n.attempt = f.attempt + 1
               WHERE f.failure_type = 'rate_limited' AND f.retry_after IS NOT NULL
                 AND n.started_at IS NOT NULL"""
        ).fetchall()
    assert pairs, "no rate-limited run was retried"
    for finished, retry_after, started in pairs:
        gap = (parse_time(started) - parse_time(finished)).total_seconds()
        assert gap >= retry_after


def test_an_expired_key_was_refreshed_and_the_retry_succeeded(finished_job):
    handle, _ = finished_job
    with handle.db() as conn:
        rows = conn.execute(
            """SELECT n.status FROM orchestrator_run f
               JOIN orchestrator_run n ON n.retry_of_id = COALESCE(f.retry_of_id, f.id)
                                      AND n.attempt = f.attempt + 1
               WHERE f.failure_type = 'auth_failure' AND f.status_code = 401"""
        ).fetchall()
    assert "succeeded" in {r[0] for r in rows}


def test_a_source_was_switched_and_partial_and_empty_results_were_kept(finished_job):
    handle, _ = finished_job
    with handle.db() as conn:
        switched = conn.execute(
            """SELECT n.source, f.source, n.status FROM orchestrator_run n
               JOIN orchestrator_run f ON f.id = n.switched_from_id"""
        ).fetchall()
        partial = conn.execute(
            "SELECT count(*) FROM orchestrator_run WHERE partial_count > 0"
        ).fetchone()[0]
        empty = conn.execute(
            "SELECT count(*) FROM orchestrator_run WHERE status='succeeded' AND result_count=0"
        ).fetchone()[0]
    assert switched and all(new != old for new, old, _ in switched)
    assert "succeeded" in {s for _, _, s in switched}
    assert partial >= 1
    assert empty >= 1


def test_runs_were_escalated_to_the_review_queue(finished_job):
    handle, _ = finished_job
    with handle.db() as conn:
        items = conn.execute(
            """SELECT i.state, r.status, i.failure_type FROM orchestrator_reviewitem i
               JOIN orchestrator_run r ON r.id = i.run_id"""
        ).fetchall()
        waiting = conn.execute(
            "SELECT count(*) FROM orchestrator_workflow WHERE status='awaiting_review'"
        ).fetchone()[0]
    assert items and all(status == "escalated" for _, status, _ in items)
    assert {"auth_failure", "unclassified"} <= {ftype for _, _, ftype in items}
    assert waiting >= 1


def test_resolving_a_review_item_continues_its_workflow(finished_job):
    handle, probes = finished_job
    assert set(probes["resolved"]) == {"payroll", "incidents"}, "the tour's escalations"
    with handle.db() as conn:
        items = conn.execute(
            """SELECT i.state, i.resolution, u.username, i.continued_at
               FROM orchestrator_reviewitem i JOIN auth_user u ON u.id = i.resolved_by_id
               WHERE i.id IN (?, ?)""",
            tuple(probes["resolved"].values()),
        ).fetchall()
        after = conn.execute(
            """SELECT r.topic, r.status FROM orchestrator_run r
               JOIN orchestrator_workflow w ON w.id = r.workflow_id
               WHERE w.name = 'Tour: AI in the back office' AND r.topic IN ('payroll', 'incidents')
               ORDER BY r.attempt DESC"""
        ).fetchall()
        flow = conn.execute(
            "SELECT status, coverage FROM orchestrator_workflow WHERE name = ?",
            ("Tour: AI in the back office",),
        ).fetchone()
    assert [(s, r, u) for s, r, u, _ in items] == [("resolved", "retry", "admin")] * 2
    assert all(continued for *_, continued in items)
    latest = {}
    for topic, status in after:
        latest.setdefault(topic, status)
    assert latest == {"payroll": "succeeded", "incidents": "succeeded"}
    assert flow["status"] in ("succeeded", "degraded")
    coverage = json.loads(flow["coverage"])
    assert coverage["archives"]["verdict"] == "gap"  # still named, with its reason
    assert coverage["payroll"]["verdict"] != "gap"


def test_a_coverage_report_names_a_gap_and_why(finished_job):
    handle, _ = finished_job
    with handle.db() as conn:
        reports = [
            json.loads(r[0])
            for r in conn.execute(
                "SELECT coverage FROM orchestrator_workflow WHERE finished_at IS NOT NULL"
            )
        ]
    gaps = [entry for report in reports for entry in report.values() if entry["verdict"] == "gap"]
    assert gaps, "no finished workflow reported a gap"
    assert all("could not be assessed" in g["why"] and g["failures"] for g in gaps)


def test_ctrl_c_stops_everything_and_a_second_launch_reuses_the_database(tmp_path):
    first = launch(tmp_path, "--every", "1")
    try:
        first.wait_for_line(r"runs [1-9]\d* \(ok", 120)
        first.proc.send_signal(signal.SIGINT)
        assert finish(first, 60) == 0, first.output + first.logs()
    finally:
        if first.proc.poll() is None:
            first.proc.kill()
    assert "Stopped:" in first.output
    assert_no_orphans(first)
    # The worker stopped its own pool (a warm shutdown): none of its processes was signalled
    # beside it, which cut their tasks short and hung the worker on the pool's queue lock.
    worker_log = (first.var / "log" / "worker.log").read_text(errors="replace")
    assert "Warm shutdown" in worker_log and "signal 15 (SIGTERM)" not in worker_log
    with first.db() as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        runs = conn.execute("SELECT count(*) FROM orchestrator_run").fetchone()[0]

    port = free_port()
    second = launch(tmp_path, "--duration", "3", "--every", "0", "--port", str(port))
    assert finish(second, 120) == 0, second.output + second.logs()
    assert "Log in as   admin (password printed at first launch" in second.output
    assert f"Dashboard   http://127.0.0.1:{port}/" in second.output
    token = re.compile(r"API token\s+(\S+)")
    assert token.search(second.output)[1] == token.search(first.output)[1]
    assert "the same at every launch" in second.output
    with second.db() as conn:
        assert conn.execute("SELECT count(*) FROM orchestrator_run").fetchone()[0] >= runs
        revoked = conn.execute(
            "SELECT count(*) FROM orchestrator_apitoken WHERE revoked_at IS NOT NULL"
        ).fetchone()[0]
    assert revoked == 0  # both launches' tokens (the local agents', the agent's) are the same


def test_a_port_in_use_is_refused_at_once_with_the_option_to_choose_another(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        handle = launch(tmp_path, "--port", str(port))
        assert finish(handle, 30) != 0
    assert f"Cannot listen on 127.0.0.1:{port}" in handle.output
    assert f'make run ARGS="--port {port + 1}"' in handle.output
    assert handle.processes() == []


def test_children_do_not_outlive_a_killed_launcher(tmp_path):
    handle = launch(tmp_path, "--every", "0")
    try:
        handle.wait_for_line(r"Dashboard\s+http://", 120)
        assert len(handle.processes()) >= 4  # provider, worker (+ its pool), web server
        handle.proc.send_signal(signal.SIGKILL)
        handle.proc.wait(timeout=10)
    finally:
        if handle.proc.poll() is None:
            handle.proc.kill()
    assert_no_orphans(handle, within=40)


def test_the_live_summary_and_the_tile_agree_on_early_repeats(finished_job):
    """The provider judges each request at its arrival (a slow answer finishing late is not a
    repeat), the tile counts retries started before their due time: both zero, and the same."""
    handle, _ = finished_job
    printed = re.findall(r"(\d+) repeats before Retry-After", handle.output)
    assert printed and printed[-1] == "0", handle.output
    with handle.db() as conn:
        early = conn.execute(
            """SELECT count(*) FROM orchestrator_run
               WHERE retry_of_id IS NOT NULL AND started_at < due_at"""
        ).fetchone()[0]
    assert early == 0
    arrivals = provider_requests(handle)
    assert all(r["t"] <= r["answered"] for r in arrivals)  # judged at arrival, logged both


def test_the_external_agents_escalations_wait_beside_the_built_in_ones(finished_job):
    handle, _ = finished_job
    with contextlib.closing(handle.db()) as db:
        origins = dict(
            db.execute(
                "SELECT origin, count(*) FROM orchestrator_reviewitem GROUP BY origin"
            ).fetchall()
        )
        external = db.execute(
            "SELECT count(*) FROM orchestrator_workflow WHERE coordinator = 'external'"
        ).fetchone()[0]
        reported = db.execute(
            "SELECT count(*) FROM orchestrator_run r JOIN orchestrator_apitoken t"
            " ON r.token_id = t.id WHERE r.agent = 'crm-agent' AND r.decision != ''"
        ).fetchone()[0]
    assert origins.get("agent", 0) >= 1 and origins.get("built_in", 0) >= 1, origins
    assert external >= 1 and reported >= 1
    assert "External agent (crm-agent" in handle.output
