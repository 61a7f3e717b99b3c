"""The MCP SDK's own client drives Failsight's MCP tools against the shipped web server: over
streamable HTTP at /mcp, and over stdio through `failsight-mcp` (which calls that server's REST
API). Each transport runs the whole loop of an agent: report a run (start, finish), decide,
escalate, an operator resolves the item in the dashboard while the agent waits, the wait returns
the resolution, ack. Refusals and failures come back in the API's error envelope."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import httpx2
import pytest
from django.contrib.auth.models import User
from django.db import connection
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from orchestrator.coordination.actions import do_resolve_review
from orchestrator.models import ApiToken, ReviewItem, Run
from orchestrator.vocabulary import Channel
from tests.api.helpers import ENVELOPE_KEYS, web_env
from tests.services import free_port, start_web

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

TOOLS = {
    "report_run",
    "decide",
    "escalate",
    "wait_for_resolution",
    "list_resolutions",
    "ack",
    "classify",
    "get_policy",
}
# A resolution carries no credential: the server filters secrets out of it (`[Filtered]`).
EDITED = {"account": "ACME", "region": "eu-west"}
FAILSIGHT_MCP = Path(sys.executable).parent / "failsight-mcp"

Session = Callable[[], contextlib.AbstractAsyncContextManager[ClientSession]]


@pytest.fixture
def server(postgres, tmp_path) -> Iterator[str]:
    process, url = start_web(web_env(tmp_path), tmp_path / "web.log", WEB_CONCURRENCY="1")
    try:
        yield url
    finally:
        process.stop()


@pytest.fixture
def operator_user(db) -> User:
    return User.objects.create_user("olga", password="operator-pass-123", is_staff=True)


def over_http(url: str, secret: str) -> Session:
    @contextlib.asynccontextmanager
    async def session() -> AsyncIterator[ClientSession]:
        headers = {"Authorization": f"Bearer {secret}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(10, read=60)) as http,
            streamable_http_client(f"{url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as mcp,
        ):
            await mcp.initialize()
            yield mcp

    return session


def over_stdio(url: str, secret: str) -> Session:
    env = {"FAILSIGHT_URL": url, "FAILSIGHT_TOKEN": secret, "PATH": os.environ["PATH"]}
    params = StdioServerParameters(command=str(FAILSIGHT_MCP), env=env)

    @contextlib.asynccontextmanager
    async def session() -> AsyncIterator[ClientSession]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            yield mcp

    return session


def answer(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def tool_error(result: CallToolResult, failure_type: str) -> dict[str, Any]:
    """The envelope of an MCP tool error, checked: ours, with MCP's names for its verdict."""
    assert result.is_error
    data = result.structured_content
    assert json.loads(result.content[0].text) == data
    assert data.keys() >= ENVELOPE_KEYS
    assert (data["status"], data["failure_type"], data["errorCategory"]) == (
        "error",
        failure_type,
        failure_type,
    )
    assert data["isRetryable"] is data["retryable"]
    return data


def resolve_soon(item_id: int, operator: User, started: threading.Event) -> None:
    """An operator resolves the item in the dashboard once the agent is waiting on it."""
    try:
        started.wait(10)
        time.sleep(1.0)
        item = ReviewItem.objects.get(pk=item_id)
        assert do_resolve_review(
            item,
            operator,
            "retry_edited",
            channel=Channel.DASHBOARD,
            note="key rotated",
            edited_input=EDITED,
        )
    finally:
        connection.close()  # this thread's


async def agent_loop(session: Session, operator: User) -> None:
    async with session() as mcp:
        listed = await mcp.list_tools()
        assert {tool.name for tool in listed.tools} == TOOLS

        run = answer(
            await mcp.call_tool(
                "report_run",
                {
                    "agent": "crm-agent",
                    "source": "crm_api",
                    "operation": "lookup",
                    "attempted": {"account": "ACME"},
                },
            )
        )
        assert run["status"] == "running"
        outcome = {
            "status": "error",
            "failure_type": "auth_error",
            "retryable": False,
            "status_code": 401,
            "detail": "401 Unauthorized: the API key expired",
            "partial_results": [{"account": "ACME", "name": "Acme Corp"}],
        }
        run = answer(await mcp.call_tool("report_run", {"run_id": run["id"], "outcome": outcome}))
        assert (run["status"], run["failure_type"]) == ("failed", "auth_failure")
        assert run["reported_failure_type"] == "auth_error"

        decision = answer(await mcp.call_tool("decide", {"run_id": run["id"]}))
        assert (decision["action"], decision["run"]) == ("escalate", run["id"])
        assert decision["reason"] and decision["delay_seconds"] == 0
        item = answer(await mcp.call_tool("escalate", {"run_id": run["id"], "reason": "stale key"}))
        assert item["id"] == decision["review"]["id"] and item["state"] == "open"
        assert item["url"].endswith(f"/review/{item['id']}/")

        pending = answer(
            await mcp.call_tool(
                "wait_for_resolution", {"review_id": item["id"], "timeout_seconds": 0.5}
            )
        )
        assert (pending["state"], pending["resolution"]) == ("open", None)

        started = threading.Event()
        operator_thread = threading.Thread(
            target=resolve_soon, args=(item["id"], operator, started)
        )
        operator_thread.start()
        try:
            began = time.monotonic()
            started.set()
            waited = answer(
                await mcp.call_tool(
                    "wait_for_resolution", {"review_id": item["id"], "timeout_seconds": 30}
                )
            )
            took = time.monotonic() - began
        finally:
            await anyio.to_thread.run_sync(operator_thread.join)
        assert waited["state"] == "resolved" and took < 15, took
        assert waited["resolution"]["action"] == "retry_edited"
        assert (waited["resolution"]["input"], waited["resolution"]["resolved_by"]) == (
            EDITED,
            "olga",
        )

        listed = answer(await mcp.call_tool("list_resolutions", {}))
        assert [r["id"] for r in listed["items"]] == [item["id"]]
        acked = answer(await mcp.call_tool("ack", {"review_id": item["id"]}))
        assert acked["delivered_at"] is not None
        assert answer(await mcp.call_tool("list_resolutions", {}))["items"] == []

        await tool_errors(mcp, run["id"])


async def tool_errors(mcp: ClientSession, run_id: int) -> None:
    missing = tool_error(
        await mcp.call_tool("report_run", {"run_id": 2**31 - 1, "outcome": {"status": "ok"}}),
        "resource_missing",
    )
    assert missing["isRetryable"] is False and "No run with id" in missing["detail"]
    again = tool_error(
        await mcp.call_tool("report_run", {"run_id": run_id, "outcome": {"status": "ok"}}),
        "invalid_input",
    )
    assert "already finished" in again["detail"]
    refused = tool_error(await mcp.call_tool("decide", {"attempt": 0}), "invalid_input")
    assert refused["errors"] and refused["attempted"] == {"operation": "tools/call decide"}

    # Our own tool error, classified by our own tool, is what it says it is.
    result = await mcp.call_tool("report_run", {"run_id": 2**31 - 1, "outcome": {"status": "ok"}})
    error = result.model_dump(mode="json", by_alias=True, exclude_none=True)
    verdict = answer(await mcp.call_tool("classify", {"error": error}))
    assert (verdict["failure_type"], verdict["retryable"]) == ("resource_missing", False)

    policy = answer(await mcp.call_tool("get_policy", {"failure_type": "auth_error"}))
    assert [row["failure_type"] for row in policy["policies"]] == ["auth_failure"]
    assert policy["version"] >= 1
    tool_error(await mcp.call_tool("get_policy", {"failure_type": "oops"}), "invalid_input")


def test_an_agent_runs_the_whole_loop_over_streamable_http(server, operator_user):
    _, secret = ApiToken.issue("crm-agent")
    anyio.run(agent_loop, over_http(server, secret), operator_user)
    run = Run.objects.get()
    assert (run.agent, run.source, run.decision) == ("crm-agent", "crm_api", "escalate")
    assert ReviewItem.objects.get().delivered_at is not None


def test_an_agent_runs_the_whole_loop_over_stdio(server, operator_user):
    _, secret = ApiToken.issue("crm-agent")
    anyio.run(agent_loop, over_stdio(server, secret), operator_user)
    assert ReviewItem.objects.get().delivered_at is not None


def test_a_wrong_token_is_refused_with_a_401_in_our_envelope(server):
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Authorization": "Bearer fs_not_a_token", "Accept": "application/json"}
    response = httpx.post(f"{server}/mcp", json=initialize, headers=headers, timeout=10)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    body = response.json()
    assert body.keys() >= ENVELOPE_KEYS
    assert (body["failure_type"], body["retryable"]) == ("auth_failure", False)
    assert httpx.post(f"{server}/mcp", json=initialize, timeout=10).status_code == 401


def test_a_wrong_token_over_stdio_is_a_tool_error_in_our_envelope(server):
    async def call() -> None:
        async with over_stdio(server, "fs_not_a_token")() as mcp:
            refused = tool_error(await mcp.call_tool("get_policy", {}), "auth_failure")
            assert "API token" in refused["detail"]

    anyio.run(call)


def test_a_failsight_that_does_not_answer_is_a_retryable_tool_error_over_stdio(db):
    async def call() -> None:
        async with over_stdio(f"http://127.0.0.1:{free_port()}", "fs_any")() as mcp:
            down = tool_error(await mcp.call_tool("get_policy", {}), "transient")
            assert down["isRetryable"] is True and "did not answer" in down["detail"]

    anyio.run(call)
