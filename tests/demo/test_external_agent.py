"""The main job's external agent (`demo.agent`): it talks to a live server only through
`AgentClient`, escalates what its stale key breaks, acts on the operator's resolutions, and rides
out a Failsight that fails. The provider is the real demonstration provider in its own process,
answering every search; the failing Failsight is a proxy in front of the live server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from django.db.models import Count

from demo.agent import ExternalAgent
from orchestrator.client import AgentClient
from orchestrator.coordination.actions import do_resolve_review
from orchestrator.models import ApiToken, ReviewItem, Run, Workflow
from orchestrator.vocabulary import Channel

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def provider() -> Iterator[str]:
    cmd = [sys.executable, "-m", "demo.provider", "--port", "0", "--mix", "ok:3=1"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    line = proc.stdout.readline().decode().strip()
    assert line.startswith("listening on "), line
    yield line.removeprefix("listening on ")
    proc.terminate()
    proc.wait(timeout=10)


def test_the_agent_imports_nothing_of_the_server():
    code = "import sys, demo.agent; print(sorted(m for m in sys.modules if m.startswith('django')))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
    source = (ROOT / "demo" / "agent.py").read_text()
    assert "from orchestrator" not in source.replace("from orchestrator.client import", "")


def test_the_agent_escalates_and_acts_on_the_resolutions(live_server, provider, operator):
    _, secret = ApiToken.issue("crm-agent")
    client = AgentClient(live_server.url, secret, strict=True)
    agent = ExternalAgent(client, provider, seed=1)
    agent.refusals_left = 2  # the key service refuses both refreshes: a person decides
    agent.key = agent.fresh_key()
    agent.start_job()  # the first job's key is stale: both lookups get a real 401
    agent.work()

    wf = Workflow.objects.get()
    assert wf.coordinator == "external" and wf.status == Workflow.Status.AWAITING_REVIEW
    items = list(ReviewItem.objects.order_by("pk"))
    assert len(items) == 2 and {i.origin for i in items} == {"agent"}
    assert {i.run.failure_type for i in items} == {"auth_failure"}
    edited = {"account": items[0].run.topic, "key": "rotated"}
    do_resolve_review(
        items[0],
        operator,
        "retry_edited",
        channel=Channel.DASHBOARD,
        note="key rotated",
        edited_input=edited,
    )
    do_resolve_review(items[1], operator, "abort", channel=Channel.DASHBOARD, note="not needed")

    agent.act_on_resolutions()
    agent.work()

    retried = Run.objects.get(retry_of=items[0].run)
    assert (retried.status, retried.attempt, retried.topic) == ("succeeded", 2, items[0].run.topic)
    assert all(i.delivered_via == "ack" for i in ReviewItem.objects.all())
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.DEGRADED  # one topic found, the aborted one a gap
    gap = wf.coverage[items[1].run.topic]
    assert gap["verdict"] == "gap" and "auth_failure" in gap["why"]
    client.close()


def test_the_agents_stale_key_is_refreshed_by_its_refresher_and_usage_is_reported(
    live_server, provider
):
    _, secret = ApiToken.issue("crm-agent")
    client = AgentClient(live_server.url, secret, strict=True)
    agent = ExternalAgent(client, provider, seed=1)
    agent.refusals_left = 0
    agent.start_job()  # the first job's key is stale: both lookups get a real 401
    agent.work()  # each 401 is answered "refresh, then retry once": the client refreshes
    agent.work()  # the retries, with the new key
    assert not ReviewItem.objects.exists() and agent.counts["refreshes"] == 2
    stale = Run.objects.filter(attempt=1).order_by("pk")
    assert [(r.failure_type, r.decision, r.decision_refresh) for r in stale] == [
        ("auth_failure", "retry", True)
    ] * 2
    retried = Run.objects.filter(attempt=2)
    assert {r.status for r in retried} == {"succeeded"} and retried.count() == 2
    # Each lookup says what the provider's model used for it (its answers' usage).
    for run in retried:
        assert run.model == "demo-reader-small" and run.input_tokens and run.output_tokens
    assert Workflow.objects.get().status == Workflow.Status.SUCCEEDED  # finished by `work`
    client.close()


class FlakyFailsight:
    """A proxy to the live server that can answer 503s, 200s whose body is not JSON, or be gone
    (connection refused) instead."""

    def __init__(self, upstream: str) -> None:
        self.upstream = httpx.Client(base_url=upstream, timeout=30)
        self.mode = "pass"
        self.server = self._serve(0)
        self.port = self.server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self, port: int) -> ThreadingHTTPServer:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def handle_one(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.mode == "gone":  # a connection kept alive from before dies too
                    self.close_connection = True
                    return None
                if proxy.mode == "503":
                    return self.answer(503, b'{"detail": "down for maintenance"}')
                if proxy.mode == "garbled":
                    return self.answer(200, b"<html><h1>Bad gateway</h1></html>")
                skip = {"host", "content-length", "connection"}
                headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
                upstream = proxy.upstream.request(
                    self.command, self.path, headers=headers, content=body
                )
                return self.answer(upstream.status_code, upstream.content)

            def answer(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = handle_one

        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        return server

    def down(self) -> None:
        self.mode = "gone"
        self.server.shutdown()
        self.server.server_close()

    def up(self) -> None:
        self.server = self._serve(self.port)
        self.mode = "pass"

    def close(self) -> None:
        self.down()
        self.upstream.close()


def wait_for(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def test_the_agent_rides_out_a_failing_failsight_and_resumes_each_step_once(live_server, provider):
    _, secret = ApiToken.issue("crm-agent")
    proxy = FlakyFailsight(live_server.url)
    stop = threading.Event()
    client = AgentClient(proxy.url, secret, strict=True, sleep=stop.wait, max_attempts=2)
    agent = ExternalAgent(client, provider, seed=3, stop=stop)
    thread = threading.Thread(target=agent.run, args=(1.0,), daemon=True)
    thread.start()
    try:
        wait_for(lambda: agent.counts["lookups"] >= 3, 30, "the agent's first lookups")
        for mode in ("503", "garbled", "refused"):
            failed = agent.counts["failsight_errors"]
            if mode == "refused":
                proxy.down()
            else:
                proxy.mode = mode
            seen = lambda failed=failed: agent.counts["failsight_errors"] > failed  # noqa: E731
            wait_for(seen, 30, f"a {mode} seen")
            assert thread.is_alive(), f"the agent died on {mode}"
            if mode == "refused":
                proxy.up()
            proxy.mode = "pass"
        jobs = agent.counts["jobs"]
        wait_for(lambda: agent.counts["jobs"] >= jobs + 2, 60, "the agent to go on")
        stop.set()
        thread.join(timeout=30)
        assert not thread.is_alive()
        agent.stop.clear()
        for _ in range(10):  # what was under way when it stopped is taken to its end
            agent.work()
    finally:
        stop.set()
        proxy.close()
        client.close()
    assert Workflow.objects.count() == agent.counts["jobs"]  # no workflow started twice
    assert not Run.objects.filter(status=Run.Status.RUNNING).exists()  # every run finished
    repeated = (
        Run.objects.values("workflow", "topic", "attempt").annotate(n=Count("pk")).filter(n__gt=1)
    )
    assert list(repeated) == []  # each step resumed, none done twice
    assert not Workflow.objects.filter(status=Workflow.Status.RUNNING).exists()


def test_the_agent_takes_its_token_from_the_environment_only(provider):
    cmd = [sys.executable, "-m", "demo.agent", "--url", "http://127.0.0.1:9"]
    cmd += ["--provider", provider]
    env = {k: v for k, v in os.environ.items() if k != "FAILSIGHT_AGENT_TOKEN"}
    refused = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert refused.returncode == 2 and "FAILSIGHT_AGENT_TOKEN" in refused.stderr
    assert (
        "--token"
        not in subprocess.run(
            [*cmd, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=30
        ).stdout
    )
    # On a Failsight that is not there it waits and goes on, then stops at once on SIGTERM.
    env["FAILSIGHT_AGENT_TOKEN"] = "fs_not-a-real-token"
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    assert "Failsight failed" in proc.stderr.read()
