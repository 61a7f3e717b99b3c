"""The main job under a storm: every fault the provider can inject, at high rates, until each one
has hit each component that calls the provider (the worker's subagents and the external agent),
then a calm in which everything started during the storm must settle, with the job still up.

Seeded and bounded (about two minutes here); the provider's own per-caller counters say which
fault hit whom, the SQLite database what became of the workflows. Runs on the embedded defaults
like the main job's test, so it never skips, in CI or not.
"""

from __future__ import annotations

import re
import signal
import time

import httpx
import pytest

from tests.demo.test_main_job import Launch, assert_no_orphans, finish, launch

pytestmark = pytest.mark.slow

FAULTS = (
    "slow",
    "drop",
    "garbled",
    "expire",
    "partial",
    "http:403",
    "http:404",
    "http:422",
    "http:429",
    "http:500",
    "http:503",
    "http:529",
)
CALLERS = ("subagent", "crm-agent")  # demo.http_sources in the worker; demo.agent
STORM = (
    "ok:3=6,empty=2,slow:3=5,drop=5,garbled=5,expire=4,partial:2:drop=3,partial:2:garbled=3,"
    "http:403=4,http:404=4,http:422=4,http:429:1=5,http:500=5,http:503:1=5,http:529=5"
)
CALM = "ok:3=1"
STORM_SECONDS = 150  # at most, until every pair was seen (about 60 s here)
SETTLE_SECONDS = 300  # at most, after the calm (breakers opened by the storm cool down for 30 s;
# about 30 s here, and CI's loaded worker keeps its backlog of the storm's runs for minutes)


def wait_until(check, timeout: float, what: str, handle: Launch):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if handle.proc.poll() is not None:
            pytest.fail(f"the main job stopped while waiting for {what}:\n{handle.output}")
        if value := check():
            return value
        time.sleep(1)
    pytest.fail(f"timed out waiting for {what}: {check()!r}\n{handle.output}\n{handle.logs()}")


def missing_pairs(provider: str) -> list[str]:
    stats = httpx.get(f"{provider}/v1/stats", timeout=5).json()
    return [
        f"{caller}:{fault}"
        for caller in CALLERS
        for fault in FAULTS
        if not stats.get(f"caller:{caller}:{fault}")
    ]


def unsettled(handle: Launch, last: int) -> list[tuple]:
    with handle.db() as conn:
        return conn.execute(
            "SELECT id, coordinator, name FROM orchestrator_workflow"
            " WHERE id <= ? AND status = 'running'",
            (last,),
        ).fetchall()


def test_every_fault_hits_every_component_and_every_workflow_settles(tmp_path):
    env = {"FAILSIGHT_PROVIDER_MIX": STORM, "FAILSIGHT_AGENT_EVERY": "1"}
    handle = launch(tmp_path, "--every", "2", "--seed", "5", env=env)
    try:
        provider = handle.wait_for_line(r"Fault-injecting provider on (\S+)", 120)[1]
        handle.wait_for_line(r"Dashboard\s+http://", 60)
        stormed = time.monotonic()
        wait_until(
            lambda: not missing_pairs(provider) or None,
            STORM_SECONDS,
            "every fault to hit every caller",
            handle,
        )
        stormed = time.monotonic() - stormed
        assert httpx.put(f"{provider}/v1/mix", json={"mix": CALM}).status_code == 200
        with handle.db() as conn:
            last = conn.execute("SELECT max(id) FROM orchestrator_workflow").fetchone()[0]
        wait_until(
            lambda: not unsettled(handle, last) or None,
            SETTLE_SECONDS,
            f"the workflows started in the {stormed:.0f} s storm to settle",
            handle,
        )
        assert handle.proc.poll() is None, "the main job stopped"
        handle.proc.send_signal(signal.SIGINT)
        assert finish(handle, 60) == 0, handle.output + handle.logs()
    finally:
        if handle.proc.poll() is None:
            handle.proc.kill()
    assert "stopped unexpectedly" not in handle.output
    assert "exited (code" not in handle.output, "a supervised child died and was restarted"
    assert_no_orphans(handle)
    with handle.db() as conn:
        external = conn.execute(
            "SELECT count(*) FROM orchestrator_workflow WHERE coordinator = 'external'"
        ).fetchone()[0]
        garbled = conn.execute(
            "SELECT count(*) FROM orchestrator_run WHERE agent = 'crm-agent'"
            " AND exception_type LIKE '%JSONDecodeError'"
        ).fetchone()[0]
    assert external >= 10 and last >= 20
    assert garbled >= 1, "the agent reported no body that was not JSON"
    agent_log = (tmp_path / "log" / "agent.log").read_text()
    summary = re.findall(r"crm-agent: (\d+) jobs .* Failsight failed (\d+) times", agent_log)
    assert summary and int(summary[-1][0]) >= 10, agent_log[-3000:]
