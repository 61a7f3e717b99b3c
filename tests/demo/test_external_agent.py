"""The main job's external agent (`demo.agent`): it talks to a live server only through
`AgentClient`, escalates what its stale key breaks, and acts on the operator's resolutions. The
provider is the real demonstration provider in its own process, answering every search."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo.agent import ExternalAgent
from orchestrator.client import AgentClient
from orchestrator.models import ApiToken, ReviewItem, Run, Workflow

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
    agent.key = agent.fresh_key()
    agent.start_job()  # the first job's key is stale: both lookups get a real 401

    wf = Workflow.objects.get()
    assert wf.coordinator == "external" and wf.status == Workflow.Status.AWAITING_REVIEW
    items = list(ReviewItem.objects.order_by("pk"))
    assert len(items) == 2 and {i.origin for i in items} == {"agent"}
    assert {i.run.failure_type for i in items} == {"auth_failure"}
    edited = {"account": items[0].run.topic, "key": "rotated"}
    items[0].resolve(operator, "retry_edited", note="key rotated", edited_input=edited)
    items[1].resolve(operator, "abort", note="not needed")

    agent.act_on_resolutions()

    retried = Run.objects.get(retry_of=items[0].run)
    assert (retried.status, retried.attempt, retried.topic) == ("succeeded", 2, items[0].run.topic)
    assert all(i.delivered_via == "ack" for i in ReviewItem.objects.all())
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.DEGRADED  # one topic found, the aborted one a gap
    gap = wf.coverage[items[1].run.topic]
    assert gap["verdict"] == "gap" and "auth_failure" in gap["why"]
    client.close()
