"""Auth failures refreshed first, on every path: the built-in coordinator (a source's refresher in
the registry), `POST /decisions` (an agent that says it can refresh, or whose envelope suggests
it), MCP `decide` and the SDK (whose client calls the agent's refresher). Each refreshes and
retries once, and escalates when the refresher fails or none is offered; refreshing first is a
routing field an editor can turn off."""

from __future__ import annotations

import httpx
import pytest
from django.test import override_settings

from orchestrator.client import AgentClient
from orchestrator.coordination import registry
from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.mcp.wsgi import McpApp
from orchestrator.models import ApiToken, ReviewItem, RoutingPolicy, Run
from tests.api.helpers import post_json
from tests.api.test_mcp import call, environ
from tests.api.test_verbatim_envelopes import WILD_ENVELOPE
from tests.orchestrator.test_coordinator import runs_of, sim  # noqa: F401 (the fixture)

TOOL = "crm_api"  # registered nowhere: only the agent can refresh its key


def decide(client, headers, attempt: int, **fields) -> dict:
    body = {"failure": WILD_ENVELOPE, "source": TOOL, "attempt": attempt} | fields
    response = post_json(client, "/decisions", body, **headers)
    assert response.status_code == 200, response.content
    return response.json()


def no_refresh_first(editor) -> None:
    row = RoutingPolicy.objects.get(failure_type="auth_failure")
    row.refresh_credentials = False
    save_policy_change(row, editor, "a human looks at every key")


# --- POST /decisions -------------------------------------------------------------------------


def test_the_seeds_envelope_is_refreshed_at_attempt_1_and_escalated_at_attempt_2(
    client, auth_headers
):
    # It suggests "refresh credentials" itself: that is the agent saying it can.
    first = decide(client, auth_headers, 1)
    assert (first["action"], first["refresh"], first["delay_seconds"]) == ("retry", True, 0.0)
    assert "refreshing its credentials once" in first["reason"]
    second = decide(client, auth_headers, 2)
    assert (second["action"], second["refresh"]) == ("escalate", False)
    assert "refreshing its credentials did not help" in second["reason"]


def test_an_agent_saying_can_refresh_is_refreshed_and_one_that_cannot_escalates(
    client, auth_headers
):
    bare = {k: v for k, v in WILD_ENVELOPE.items() if k != "alternatives_suggested"}
    offered = decide(client, auth_headers, 1, failure=bare, can_refresh=True)
    assert (offered["action"], offered["refresh"]) == ("retry", True)
    none = decide(client, auth_headers, 1, failure=bare)
    assert (none["action"], none["refresh"]) == ("escalate", False)
    assert "nor did its agent offer one" in none["reason"]


def test_refreshing_first_is_a_policy_field_an_editor_turns_off(
    client, auth_headers, policy_editor
):
    assert RoutingPolicy.objects.get(failure_type="auth_failure").refresh_credentials
    no_refresh_first(policy_editor)
    answer = decide(client, auth_headers, 1, can_refresh=True)
    assert (answer["action"], answer["refresh"]) == ("escalate", False)
    assert "the policy does not refresh credentials first" in answer["reason"]
    listed = client.get("/api/v1/policies", **auth_headers).json()["policies"]
    assert {p["failure_type"]: p["refresh_credentials"] for p in listed}["auth_failure"] is False


def test_a_reported_runs_refresh_is_recorded_on_it_and_its_retry_escalates(client, auth_headers):
    def reported(**fields) -> dict:
        body = WILD_ENVELOPE | {"agent": "crm-agent", "source": TOOL} | fields
        response = post_json(client, "/runs", body, **auth_headers)
        assert response.status_code == 201, response.content
        return response.json()

    first = reported()
    answer = post_json(client, "/decisions", {"run": first["id"]}, **auth_headers).json()
    assert (answer["action"], answer["refresh"], answer["run"]) == ("retry", True, first["id"])
    assert Run.objects.get(pk=first["id"]).decision_refresh
    assert Run.objects.refreshed().count() == 1
    retry = reported(attempt=2, retry_of=first["id"])
    again = post_json(client, "/decisions", {"run": retry["id"]}, **auth_headers).json()
    assert (again["action"], again["refresh"]) == ("escalate", False)
    assert again["review"]["id"] == ReviewItem.objects.get(run_id=retry["id"]).pk


# --- the built-in coordinator ----------------------------------------------------------------


def test_the_coordinator_refreshes_a_sources_credentials_and_retries_once(sim):  # noqa: F811
    wf = sim.start(["film"], {"news_api:film": "auth_refreshable"})
    sim.drive()
    first, second = runs_of(wf, "film")
    assert (first.decision, first.decision_refresh) == ("retry", True)
    assert (second.attempt, second.status) == (2, "succeeded")


def test_the_coordinator_escalates_when_the_refresher_raises(sim):  # noqa: F811
    refreshes: list[str] = []

    def locked(query: dict) -> list[dict]:
        request = httpx.Request("GET", "https://locked.example/search")
        response = httpx.Response(401, json={"error": "key revoked"}, request=request)
        response.raise_for_status()
        return []

    def refresh() -> None:
        refreshes.append("tried")
        raise PermissionError("the key service is down")

    reg = registry.Registry()
    reg.register("cap", "locked_api", locked, refresher=refresh)
    registry.use_registry(reg)
    try:
        wf = sim.start(["film"], {}, capability="cap")
        sim.drive()
    finally:
        registry.use_registry(None)
    first, second = runs_of(wf, "film")
    assert (first.decision, first.decision_refresh) == ("retry", True)
    assert refreshes == ["tried"]
    # The refresh failed, so the source was not called again: the retry is an auth failure.
    assert (second.failure_type, second.calls) == ("auth_failure", 0)
    assert "Refreshing the credentials of locked_api failed" in second.detail
    assert second.decision == "escalate" and "did not help" in second.decision_reason
    assert ReviewItem.objects.filter(run=second).exists()


# --- MCP decide ------------------------------------------------------------------------------

serving = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def mcp_decide(secret: str, arguments: dict) -> dict:
    params = {"name": "decide", "arguments": arguments}
    message = {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": params}
    status, _, body = call(McpApp(), environ(message=message, authorization=f"Bearer {secret}"))
    assert status.startswith("200") and not body["result"].get("isError"), body
    return body["result"]["structuredContent"]


@serving
@override_settings(ALLOWED_HOSTS=["127.0.0.1"], API_RATE_LIMIT_PER_MINUTE=0)
def test_mcp_decide_answers_refresh_once_then_escalation():
    _, secret = ApiToken.issue("desktop-agent")
    bare = {k: v for k, v in WILD_ENVELOPE.items() if k != "alternatives_suggested"}
    ask = {"failure": bare, "source": TOOL, "can_refresh": True}
    first = mcp_decide(secret, ask | {"attempt": 1})
    assert (first["action"], first["refresh"]) == ("retry", True)
    assert mcp_decide(secret, ask | {"attempt": 2})["action"] == "escalate"
    # Without can_refresh (and no suggestion in the failure), a human decides at once.
    assert mcp_decide(secret, {"failure": bare, "source": TOOL})["action"] == "escalate"


# --- the SDK ---------------------------------------------------------------------------------


@pytest.fixture
def sdk(live_server):
    _, secret = ApiToken.issue("sdk-agent")

    def make(refresher=None) -> AgentClient:
        return AgentClient(live_server.url, secret, strict=True, refresher=refresher)

    return make


def failed_lookup(client: AgentClient, attempt: int = 1, retry_of: int | None = None) -> dict:
    request = httpx.Request("GET", "https://crm.example/accounts")
    response = httpx.Response(401, json={"error": "key expired"}, request=request)
    exc = httpx.HTTPStatusError("401 Unauthorized", request=request, response=response)
    run = client.start("crm-agent", TOOL, "lookup", attempt=attempt, retry_of=retry_of)
    client.finish(run["id"], exc, source=TOOL)
    return run


@serving
def test_the_sdk_calls_the_agents_refresher_and_its_retry_succeeds(sdk):
    keys = ["stale"]
    client = sdk(refresher=lambda: keys.append("fresh"))
    first = failed_lookup(client)
    answer = client.decide(first["id"])
    assert (answer["action"], answer["refresh"]) == ("retry", True)
    assert keys == ["stale", "fresh"]  # refreshed by the client, before the retry
    retry = client.start("crm-agent", TOOL, "lookup", attempt=2, retry_of=first["id"])
    client.finish(retry["id"], {"status": "ok", "results": [{"account": "ACME"}]})
    assert Run.objects.get(pk=retry["id"]).status == "succeeded"
    assert Run.objects.get(pk=first["id"]).decision_refresh
    # Another task whose retry fails with auth again is escalated, without a second refresh.
    other = failed_lookup(client)
    assert client.decide(other["id"])["refresh"] is True
    again = failed_lookup(client, attempt=2, retry_of=other["id"])
    assert client.decide(again["id"])["action"] == "escalate"
    assert keys == ["stale", "fresh", "fresh"]


@serving
def test_the_sdk_escalates_when_the_refresher_raises_or_there_is_none(sdk):
    def broken() -> None:
        raise PermissionError("the key service refused")

    client = sdk(refresher=broken)
    run = failed_lookup(client)
    answer = client.decide(run["id"])
    assert (answer["action"], answer["refresh"]) == ("escalate", False)
    assert "the key service refused" in answer["reason"]
    item = ReviewItem.objects.get(run_id=run["id"])
    assert answer["review"]["id"] == item.pk and "refreshing the credentials failed" in item.reason
    plain = sdk()
    other = failed_lookup(plain)
    assert plain.decide(other["id"])["action"] == "escalate"
