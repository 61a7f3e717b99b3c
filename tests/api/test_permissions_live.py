"""A few rows of the permission table (test_permissions.py) over real HTTP, against the web server
as shipped: another token's run is a 404 to a token without scopes, read with read:all, decided
on with act:all only; the runs list holds no other token's run; the MCP tool `decide` at /mcp
answers another token's run as the API does."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import httpx
import pytest

from orchestrator.models import ApiToken, Run
from tests.api.helpers import failed_run, web_env
from tests.api.test_mcp_live import answer, over_http, tool_error
from tests.services import start_web

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


@pytest.fixture
def web(postgres, tmp_path) -> Iterator[str]:
    server, url = start_web(web_env(tmp_path), tmp_path / "web.log", WEB_CONCURRENCY="1")
    try:
        yield url
    finally:
        server.stop()


def api(url: str, secret: str) -> httpx.Client:
    headers = {"Authorization": f"Bearer {secret}"}
    return httpx.Client(base_url=f"{url}/api/v1", headers=headers, timeout=30)


def test_another_tokens_run_over_http_by_scope(web):
    _, reporter = ApiToken.issue("agent-b")
    with api(web, reporter) as b:
        theirs = b.post("/runs", json=failed_run(topic="b's own")).json()["id"]
    secrets = {
        name: ApiToken.issue(f"agent-{name}", scopes=scopes)[1]
        for name, scopes in {
            "none": [],
            "reader": ["read:all"],
            "actor": ["act:all"],
        }.items()
    }
    with api(web, secrets["none"]) as a:
        mine = a.post("/runs", json=failed_run()).json()["id"]
        unknown = a.get("/runs/999999999")
        refused = a.get(f"/runs/{theirs}")
        assert (refused.status_code, unknown.status_code) == (404, 404)
        assert refused.json()["failure_type"] == unknown.json()["failure_type"]
        assert "b's own" not in refused.text
        assert [r["id"] for r in a.get("/runs").json()["items"]] == [mine]
        assert a.post("/decisions", json={"run": theirs}).status_code == 404
    with api(web, secrets["reader"]) as reader:
        assert reader.get(f"/runs/{theirs}").json()["topic"] == "b's own"
        assert theirs in {r["id"] for r in reader.get("/runs").json()["items"]}
        assert reader.post("/decisions", json={"run": theirs}).status_code == 404
    assert Run.objects.get(pk=theirs).decision == ""

    async def over_mcp() -> None:
        async with over_http(web, secrets["none"])() as mcp:
            refused = await mcp.call_tool("decide", {"run_id": theirs})
            tool_error(refused, "resource_missing")
        async with over_http(web, secrets["actor"])() as mcp:
            decided = answer(await mcp.call_tool("decide", {"run_id": theirs}))
            assert decided["run"] == theirs

    anyio.run(over_mcp)
    assert Run.objects.get(pk=theirs).decision != ""
