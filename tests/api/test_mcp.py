"""The /mcp endpoint in process, as the WSGI server mounts it (the ASGI endpoint through
a2wsgi): what is refused before the MCP app (a host not served, a missing or unknown token, too
many requests, an overloaded server) is refused in the API's envelope, an admitted request's
token reaches the tools, and only /mcp reaches the app. The whole loop: test_mcp_live.py."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.test import override_settings

from orchestrator.api.overload import shed
from orchestrator.mcp.wsgi import McpApp, mounted
from orchestrator.models import ApiToken, Run
from tests.api.helpers import ENVELOPE_KEYS

# The layer checks connections out and gives them back as Django's handler does around a request,
# which a test's enclosing transaction would not survive.
serving = pytest.mark.django_db(transaction=True, serialized_rollback=True)


LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def environ(path: str = "/mcp", message: dict[str, Any] = LIST, **headers: str) -> dict[str, Any]:
    body = json.dumps(message).encode()
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "HTTP_HOST": headers.pop("host", "127.0.0.1"),
        "CONTENT_TYPE": "application/json",
        "HTTP_ACCEPT": "application/json, text/event-stream",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.url_scheme": "http",
        **{f"HTTP_{name.upper()}": value for name, value in headers.items()},
    }


def call(app: Any, env: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
    started: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        # Header names are case-insensitive: Starlette sends them in lower case.
        started.update(status=status, headers={name.lower(): value for name, value in headers})

    body = b"".join(app(env, start_response))
    return started["status"], started["headers"], json.loads(body)


def envelope_of(body: dict[str, Any], failure_type: str) -> dict[str, Any]:
    assert body.keys() >= ENVELOPE_KEYS
    assert (body["status"], body["failure_type"]) == ("error", failure_type)
    assert body["attempted"] == {"operation": "POST /mcp"}
    return body


@serving
@override_settings(ALLOWED_HOSTS=["127.0.0.1"], API_RATE_LIMIT_PER_MINUTE=0)
def test_a_request_without_a_known_token_is_a_401_envelope():
    for headers in ({}, {"authorization": "Bearer fs_unknown"}, {"authorization": "Basic x"}):
        status, sent, body = call(McpApp(), environ(**headers))
        assert status.startswith("401") and sent["www-authenticate"].startswith("Bearer")
        assert envelope_of(body, "auth_failure")["retryable"] is False


@serving
@override_settings(ALLOWED_HOSTS=["127.0.0.1"], API_RATE_LIMIT_PER_MINUTE=0)
def test_a_revoked_token_is_refused_like_an_unknown_one():
    token, secret = ApiToken.issue("agent")
    token.revoke()
    status, _, body = call(McpApp(), environ(authorization=f"Bearer {secret}"))
    assert status.startswith("401")
    envelope_of(body, "auth_failure")


@serving
@override_settings(ALLOWED_HOSTS=["failsight.example"])
def test_a_host_not_served_is_a_400_envelope_before_any_token_is_read():
    status, _, body = call(McpApp(), environ(host="evil.example", authorization="Bearer x"))
    assert status.startswith("400")
    assert "evil.example" in envelope_of(body, "invalid_input")["detail"]


@serving
@override_settings(ALLOWED_HOSTS=["127.0.0.1"], API_RATE_LIMIT_PER_MINUTE=2)
def test_the_rate_limit_of_the_api_counts_mcp_requests_per_token():
    _, secret = ApiToken.issue("agent")
    app = McpApp()
    answers = [call(app, environ(authorization=f"Bearer {secret}")) for _ in range(3)]
    assert [status[:3] for status, _, _ in answers] == ["200", "200", "429"]
    assert {tool["name"] for tool in answers[0][2]["result"]["tools"]} >= {"decide", "ack"}
    _, headers, body = answers[2]
    assert envelope_of(body, "rate_limited")["retry_after"] is not None
    assert "retry-after" in headers


@serving
@override_settings(ALLOWED_HOSTS=["127.0.0.1"], API_RATE_LIMIT_PER_MINUTE=0)
def test_an_admitted_request_calls_the_tools_as_its_own_token():
    from django.contrib.auth.models import User

    from orchestrator.coordination.actions import do_resolve_review
    from orchestrator.models import ReviewItem
    from orchestrator.vocabulary import Channel

    mine, secret = ApiToken.issue("agent-a")
    _, other = ApiToken.issue("agent-b")
    run = Run.objects.create(token=mine, agent="a", source="s", status=Run.Status.FAILED)
    item = ReviewItem.objects.create(run=run, token=mine, reason="stale key")
    do_resolve_review(
        item, User.objects.create_user("olga"), "abort", channel=Channel.DASHBOARD, note="stop"
    )
    listed = {"name": "list_resolutions", "arguments": {}}
    message = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": listed}

    def resolutions(secret: str) -> list[int]:
        status, _, body = call(McpApp(), environ(message=message, authorization=f"Bearer {secret}"))
        assert status.startswith("200") and not body["result"].get("isError"), body
        return [entry["id"] for entry in body["result"]["structuredContent"]["items"]]

    assert resolutions(secret) == [item.pk]
    assert resolutions(other) == []


@serving
@override_settings(ALLOWED_HOSTS=["127.0.0.1"], API_RATE_LIMIT_PER_MINUTE=0)
def test_arguments_a_tool_does_not_take_or_cannot_read_are_refused_in_the_envelope():
    _, secret = ApiToken.issue("agent")

    def refused(arguments: dict[str, Any]) -> dict[str, Any]:
        params = {"name": "report_run", "arguments": arguments}
        message = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params}
        status, _, body = call(McpApp(), environ(message=message, authorization=f"Bearer {secret}"))
        assert status.startswith("200") and body["result"]["isError"], body
        data = body["result"]["structuredContent"]
        assert (data["failure_type"], data["errorCategory"]) == ("invalid_input", "invalid_input")
        assert data["attempted"] == {"operation": "tools/call report_run"}
        return {error["path"] for error in data["errors"]}

    # A misspelt run_id would otherwise start a new run.
    assert refused({"runid": 7, "outcome": {"status": "ok"}}) == {"runid"}
    assert refused({"run_id": "seven", "outcome": {"status": "maybe"}}) == {
        "run_id",
        "outcome.status",
    }
    assert not Run.objects.exists()


def test_only_the_mcp_path_reaches_the_mcp_app():
    def named(name: str) -> Any:
        return lambda environ, start_response: [name.encode()]

    app = mounted(named("django"), named("mcp"))
    routed = {path: b"".join(app({"PATH_INFO": path}, None)) for path in ("/mcp", "/mcp/x")}
    routed |= {path: b"".join(app({"PATH_INFO": path}, None)) for path in ("/mcpx", "/api/v1/")}
    assert routed == {"/mcp": b"mcp", "/mcp/x": b"mcp", "/mcpx": b"django", "/api/v1/": b"django"}


@pytest.mark.parametrize("path", ["/mcp", "/api/v1/runs"])
def test_an_overloaded_server_refuses_agents_in_the_envelope(path):
    status, headers, body = shed("POST", path)
    assert status == 503 and dict(headers)["Retry-After"] == "1"
    data = json.loads(body)
    assert (data["failure_type"], data["retryable"], data["retry_after"]) == (
        "server_fault",
        True,
        1.0,
    )


@serving
@override_settings(ALLOWED_HOSTS=["127.0.0.1"], API_RATE_LIMIT_PER_MINUTE=0)
def test_report_run_takes_usage_and_cost_as_the_rest_api_does():
    _, secret = ApiToken.issue("agent")
    outcome = {
        "status": "ok",
        "results": [],
        "usage": {"input_tokens": 120, "output_tokens": 30, "model": "gpt-4o"},
        "cost": {"amount": "0.0042", "currency": "USD"},
    }
    arguments = {"agent": "a", "source": "openai", "outcome": outcome}
    params = {"name": "report_run", "arguments": arguments}
    message = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": params}
    status, _, body = call(McpApp(), environ(message=message, authorization=f"Bearer {secret}"))
    assert status.startswith("200") and not body["result"].get("isError"), body
    data = body["result"]["structuredContent"]
    assert data["usage"]["input_tokens"] == 120
    assert data["cost"] == {"amount": "0.004200", "currency": "USD", "source": "reported"}
    run = Run.objects.get()
    assert (run.input_tokens, run.output_tokens, str(run.cost)) == (120, 30, "0.004200")
