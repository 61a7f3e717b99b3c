"""The /mcp endpoint's WSGI layer, in process: what is refused before the MCP app (a host not
served, a missing or unknown token, too many requests, an overloaded server) is refused in the
API's envelope, and only /mcp reaches the app. The tools themselves: test_mcp_live.py."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from django.test import override_settings

from orchestrator.api.mcp import TOKEN, McpApp, mounted
from orchestrator.api.overload import shed
from orchestrator.models import ApiToken
from tests.api.helpers import ENVELOPE_KEYS

# The layer checks connections out and gives them back as Django's handler does around a request,
# which a test's enclosing transaction would not survive.
serving = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def environ(path: str = "/mcp", **headers: str) -> dict[str, Any]:
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}'
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000",
        "HTTP_HOST": headers.pop("host", "127.0.0.1"),
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.url_scheme": "http",
        **{f"HTTP_{name.upper()}": value for name, value in headers.items()},
    }


def call(app: Any, env: dict[str, Any]) -> tuple[str, dict[str, str], dict[str, Any]]:
    started: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        started.update(status=status, headers=dict(headers))

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
        assert status.startswith("401") and sent["WWW-Authenticate"].startswith("Bearer")
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
    refusals = [app.refusal(environ(authorization=f"Bearer {secret}")) for _ in range(3)]
    assert refusals[:2] == [None, None]
    assert (refusals[2].status, refusals[2].failure_type) == (429, "rate_limited")
    assert refusals[2].retry_after is not None


@serving
@override_settings(ALLOWED_HOSTS=["127.0.0.1"], API_RATE_LIMIT_PER_MINUTE=0)
def test_an_accepted_request_carries_its_token_to_the_tools():
    token, secret = ApiToken.issue("agent")
    env = environ(authorization=f"Bearer {secret}")
    assert McpApp().refusal(env) is None
    assert env[TOKEN] == token


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
