"""The MCP endpoint as an ASGI app (`orchestrator.mcp.app.asgi_app`) under a real ASGI server,
granian with its lifespan: the SDK's client calls the tools as its token, a wrong token is the
API's 401 envelope, and the server stops cleanly (the session manager leaves at shutdown)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

import anyio
import httpx
import pytest

from orchestrator.models import ApiToken
from tests.api.helpers import ENVELOPE_KEYS, web_env
from tests.api.test_mcp_live import answer, over_http, tool_error
from tests.services import ROOT, Process, free_port, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


@pytest.fixture
def asgi_server(postgres, tmp_path) -> Iterator[tuple[str, Process]]:
    port = free_port()
    env = web_env(tmp_path) | {"PYTHONPATH": str(ROOT)}
    command = (
        f"exec python -m granian --interface asgi --host 127.0.0.1 --port {port} "
        "tests.api.mcp_asgi:app"
    )
    process = Process("mcp-asgi", command, env, tmp_path / "asgi.log").start()
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert process.proc is not None
        if process.proc.poll() is not None:
            raise RuntimeError(f"the ASGI server exited:\n{process.text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            return httpx.post(f"{url}/mcp", timeout=2).status_code > 0
        return False

    wait_until(answers, 60, "the ASGI server to answer")
    try:
        yield url, process
    finally:
        process.kill()


def test_the_asgi_app_serves_the_tools_as_the_callers_token(asgi_server):
    url, process = asgi_server
    _, secret = ApiToken.issue("crm-agent")

    async def call() -> None:
        async with over_http(url, secret)() as mcp:
            policy = answer(await mcp.call_tool("get_policy", {"failure_type": "auth_error"}))
            assert [row["failure_type"] for row in policy["policies"]] == ["auth_failure"]
            refused = tool_error(await mcp.call_tool("ack", {"review_id": 0}), "invalid_input")
            assert [error["path"] for error in refused["errors"]] == ["review_id"]
            unknown = tool_error(await mcp.call_tool("nap", {}), "invalid_input")
            assert "No tool 'nap'" in unknown["detail"]

    anyio.run(call)

    response = httpx.post(f"{url}/mcp", json={}, headers={"Authorization": "Bearer fs_no"})
    assert response.status_code == 401 and response.headers["WWW-Authenticate"]
    body = response.json()
    assert body.keys() >= ENVELOPE_KEYS and body["failure_type"] == "auth_failure"

    assert process.proc is not None
    process.proc.send_signal(signal.SIGINT)
    assert process.proc.wait(timeout=30) == 0, process.text()[-3000:]
    assert "Traceback" not in process.text(), process.text()[-3000:]
