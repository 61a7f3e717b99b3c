"""The domain's envelopes accepted verbatim, over HTTP against the web server as shipped: its
own example envelopes (no agent, no source, one without a status), MCP tool results with every
errorCategory and isRetryable on /runs and /decisions, delays said in bodies and in the IETF
RateLimit field on /classify, and a failure classified by an agent with overrides older than the
server's, classified again by the server with its current ones.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.db import connection

from orchestrator.client import AgentClient
from orchestrator.coordination.policy_changes import delete_policy_object, save_policy_change
from orchestrator.models import ApiToken, ProviderOverride, Run
from tests.api.helpers import ENVELOPE_KEYS, web_env
from tests.classifier.faults import http_server
from tests.conftest import require_service
from tests.services import start_web

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

# The domain's example envelopes, copied verbatim ("//" comments left out: JSON has none).
DOMAIN_ENVELOPE = {
    "status": "error",
    "failure_type": "timeout",
    "retryable": True,
    "retry_after": 2.0,
    "attempted": {"operation": "web_search", "query": "AI impact on film production 2024"},
    "partial_results": [{"url": "…", "excerpt": "…"}],
    "alternatives": ["retry with narrower query", "use news_api instead of web crawl"],
    "detail": "ReadTimeout: read timed out after 10 s",
    "results": [],
}
WILD_ENVELOPE = {
    "failure_type": "auth_error",
    "partial_results": [],
    "alternatives_suggested": ["refresh credentials"],
    "retry_recommended": False,
}
CAMEL_CASE_ENVELOPE = {
    "status": "error",
    "failureType": "timeout",
    "attemptedQuery": "AI impact on film production 2024",
    "partialResults": [{"url": "...", "excerpt": "..."}],
    "alternatives": ["retry with narrower query", "use news API instead of web crawl"],
}

RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"

# MCP's four errorCategory values and the failure types they are stored as.
MCP_CATEGORIES = {
    "transient": "transient",
    "validation": "invalid_input",
    "business": "invalid_input",
    "permission": "auth_failure",
}


@pytest.fixture(scope="module")
def web(django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_service(connection.vendor == "postgresql", "PostgreSQL")
    var = tmp_path_factory.mktemp("web")
    server, url = start_web(web_env(var), var / "web.log", WEB_CONCURRENCY="1")
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture
def api(web: str) -> Iterator[httpx.Client]:
    _, secret = ApiToken.issue("research-agent")
    headers = {"Authorization": f"Bearer {secret}"}
    with httpx.Client(base_url=f"{web}/api/v1", headers=headers, timeout=30) as client:
        yield client


def created(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 201, response.text
    return response.json()


# --- the domain's example envelopes ---


def test_the_domains_full_envelope_is_stored_as_sent(api: httpx.Client) -> None:
    run = created(api.post("/runs", json=DOMAIN_ENVELOPE))
    assert (run["agent"], run["source"]) == ("research-agent", "unknown")
    assert run["status"] == "failed" and run["failure_type"] == "timeout"
    assert run["retryable"] is True and run["retry_after"] == 2.0
    assert run["operation"] == "web_search"
    assert run["partial_results"] == [{"url": "…", "excerpt": "…"}]
    assert run["detail"] == "ReadTimeout: read timed out after 10 s"


def test_the_domains_envelope_without_status_agent_or_source_is_a_failure(
    api: httpx.Client,
) -> None:
    run = created(api.post("/runs", json=WILD_ENVELOPE))
    assert run["status"] == "failed"  # a failure type says error
    assert (run["agent"], run["source"]) == ("research-agent", "unknown")
    assert run["failure_type"] == "auth_failure" and run["reported_failure_type"] == "auth_error"
    assert run["retryable"] is False
    assert run["alternatives"] == ["refresh credentials"]
    stored = Run.objects.get(pk=run["id"])
    assert stored.token.name == "research-agent" and stored.retryable is False


def test_the_domains_camel_case_envelope_is_stored_with_its_query(api: httpx.Client) -> None:
    run = created(api.post("/runs", json=CAMEL_CASE_ENVELOPE))
    assert run["failure_type"] == "timeout"
    assert run["attempted"] == {"query": "AI impact on film production 2024"}
    assert run["partial_results"] == [{"url": "...", "excerpt": "..."}]
    assert run["alternatives"][1] == "use news API instead of web crawl"


def test_the_domains_envelopes_go_through_a_batch_too(api: httpx.Client) -> None:
    items = [DOMAIN_ENVELOPE, WILD_ENVELOPE, CAMEL_CASE_ENVELOPE]
    response = api.post("/runs/batch", json={"runs": items})
    assert response.status_code == 200, response.text
    assert [item["status"] for item in response.json()["results"]] == ["created"] * 3


def test_a_source_named_in_attempted_is_the_runs_source(api: httpx.Client) -> None:
    body = WILD_ENVELOPE | {"attempted": {"source": "news_api", "query": "film"}}
    assert created(api.post("/runs", json=body))["source"] == "news_api"


def test_an_outcome_that_says_neither_status_nor_failure_is_still_refused(
    api: httpx.Client,
) -> None:
    response = api.post("/runs", json={"partial_results": [], "alternatives": []})
    assert response.status_code == 422, response.text
    body = response.json()
    assert set(body) == ENVELOPE_KEYS
    assert "status" in {error["path"] for error in body["errors"]}


# --- MCP tool results ---


def mcp_result(category: str, retryable: bool, *, nested: bool = False) -> dict[str, Any]:
    fields = {"errorCategory": category, "isRetryable": retryable}
    result: dict[str, Any] = {
        "isError": True,
        "content": [{"type": "text", "text": f"search failed ({category})"}],
    }
    return result | ({"structuredContent": fields} if nested else fields)


@pytest.mark.parametrize("category", MCP_CATEGORIES)
def test_every_mcp_error_category_is_stored_on_runs(api: httpx.Client, category: str) -> None:
    retryable = category == "transient"
    for nested in (False, True):
        run = created(api.post("/runs", json=mcp_result(category, retryable, nested=nested)))
        assert run["status"] == "failed"
        assert run["failure_type"] == MCP_CATEGORIES[category], run
        assert run["retryable"] is retryable  # isRetryable, read
        assert run["detail"] == f"search failed ({category})"
        assert (run["agent"], run["source"]) == ("research-agent", "unknown")


def test_an_mcp_structured_error_with_its_message_and_query_is_stored(api: httpx.Client) -> None:
    body = {
        "isError": True,
        "errorCategory": "business",
        "isRetryable": False,
        "message": "Refund exceeds limit",
        "attempted_query": "refund order 42",
        "partial_results": [],
    }
    run = created(api.post("/runs", json=body | {"agent": "refunds", "source": "billing"}))
    assert run["failure_type"] == "invalid_input" and run["reported_failure_type"] == "business"
    assert run["detail"] == "Refund exceeds limit"
    assert run["attempted"] == {"query": "refund order 42"}


def test_an_mcp_success_is_an_ok_run_with_its_content(api: httpx.Client) -> None:
    body = {"isError": False, "content": [{"type": "text", "text": "3 articles"}]}
    run = created(api.post("/runs", json=body))
    assert run["status"] == "succeeded"
    assert run["results"] == [{"type": "text", "text": "3 articles"}]


def test_an_unknown_mcp_category_is_refused(api: httpx.Client) -> None:
    response = api.post("/runs", json=mcp_result("cosmic_rays", True))
    assert response.status_code == 422, response.text
    assert "errorCategory" in {error["path"] for error in response.json()["errors"]}


def test_is_error_contradicting_status_is_refused(api: httpx.Client) -> None:
    response = api.post("/runs", json=mcp_result("transient", True) | {"status": "ok"})
    assert response.status_code == 422, response.text
    assert "isError" in {error["path"] for error in response.json()["errors"]}


@pytest.mark.parametrize("category", MCP_CATEGORIES)
def test_every_mcp_error_category_is_decided_on(api: httpx.Client, category: str) -> None:
    retryable = category == "transient"
    for nested in (False, True):
        failure = mcp_result(category, retryable, nested=nested)
        response = api.post("/decisions", json={"failure": failure, "source": "web_search"})
        assert response.status_code == 200, response.text
        decision = response.json()
        assert (decision["action"] == "retry") is retryable, decision


def test_is_retryable_false_is_never_retried_on_decisions(api: httpx.Client) -> None:
    failure = mcp_result("transient", False)
    decision = api.post("/decisions", json={"failure": failure, "source": "web_search"}).json()
    assert decision["action"] != "retry"
    assert "cannot help" in decision["reason"] or "not retry" in decision["reason"], decision


def test_an_mcp_result_without_a_category_is_classified_for_a_decision(
    api: httpx.Client,
) -> None:
    failure = {
        "isError": True,
        "content": [{"type": "text", "text": "upstream said 429"}],
        "structuredContent": {"code": 429, "retryAfter": 12},
    }
    response = api.post("/decisions", json={"failure": failure, "source": "web_search"})
    assert response.status_code == 200, response.text
    decision = response.json()
    assert decision["action"] == "retry" and decision["delay_seconds"] >= 12


# --- delays said in bodies and in the RateLimit field ---


@pytest.mark.parametrize(
    ("described", "delay"),
    [
        ({"status_code": 429, "body": {"retry_after": 30}}, 30.0),
        ({"status_code": 429, "body": '{"error": {"retryAfter": 8}}'}, 8.0),
        ({"status_code": 503, "body": {"retry_after_ms": 1500}}, 1.5),
        (
            {
                "status_code": 429,
                "body": {
                    "error": {
                        "status": "RESOURCE_EXHAUSTED",
                        "details": [
                            {
                                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                                "retryDelay": "30s",
                            }
                        ],
                    }
                },
            },
            30.0,
        ),
        ({"status_code": 429, "headers": {"RateLimit": '"default";r=0;t=50'}}, 50.0),
        ({"status_code": 429, "headers": {"RateLimit-Reset": "50"}}, 50.0),
        (
            {"status_code": 429, "headers": {"Retry-After": "3"}, "body": {"retry_after": 40}},
            3.0,
        ),
    ],
)
def test_classify_reads_delays_from_bodies_and_the_ratelimit_field(
    api: httpx.Client, described: dict[str, Any], delay: float
) -> None:
    response = api.post("/classify", json=described)
    assert response.status_code == 200, response.text
    assert response.json()["retry_after"] == delay


# --- a failure classified with older overrides ---

SOURCE = "catalog_api"


def announced_version(web: str, secret: str) -> int:
    headers = {"Authorization": f"Bearer {secret}"}
    response = httpx.get(f"{web}/api/v1/policies", headers=headers, timeout=10)
    return int(response.headers["X-Policy-Version"])


def wait_for_version(web: str, secret: str, version: int) -> None:
    deadline = time.monotonic() + 15
    while announced_version(web, secret) != version:
        assert time.monotonic() < deadline, f"the server never announced version {version}"
        time.sleep(0.2)


def failing_search(client: AgentClient, fault_url: str) -> dict[str, Any]:
    """A real httpx 404 from a local server, tracked and reported by the client."""
    with (
        pytest.raises(httpx.HTTPStatusError),
        client.track("indexer", SOURCE, "lookup", {"query": "film"}) as call,
    ):
        httpx.get(f"{fault_url}/s/status-404", timeout=5).raise_for_status()
    assert call.run is not None
    return call.run


def test_the_first_failure_after_an_override_edit_is_classified_again(web: str) -> None:
    _, secret = ApiToken.issue("indexer")
    with http_server() as fault_url, AgentClient(web, secret, strict=True) as client:
        assert client.refresh_policies()
        before = int(client.policy_version or 0)
        override = ProviderOverride(
            provider=SOURCE,
            match_on="status_code",
            match_value="404",
            failure_type="transient",
            retryable=True,
            note="the catalog answers 404 while it re-indexes",
        )
        edited = save_policy_change(override, None)
        assert edited == before + 1
        wait_for_version(web, secret, edited)

        run = failing_search(client, fault_url)  # classified with `before`: resource_missing
        assert run["failure_type"] == "transient" and run["retryable"] is True
        assert run["reported_failure_type"] == "resource_missing"
        assert run["classified_policy_version"] == edited
        assert Run.objects.get(pk=run["id"]).classified_policy_version == edited

        again = failing_search(client, fault_url)  # the client saw the version and refetched
        assert client.policy_version == str(edited)
        assert again["failure_type"] == "transient" and again["reported_failure_type"] is None
        assert again["classified_policy_version"] == edited

        removed = delete_policy_object(override, None)
        wait_for_version(web, secret, removed)
        third = failing_search(client, fault_url)  # the client still holds the override
        assert third["failure_type"] == "resource_missing" and third["retryable"] is False
        assert third["reported_failure_type"] == "transient"
        assert third["classified_policy_version"] == removed


def test_reports_without_a_version_meet_the_current_overrides_in_batches_and_finishes(
    api: httpx.Client, web: str
) -> None:
    override = ProviderOverride(
        provider=SOURCE,
        match_on="provider_code",
        match_value="CatalogBusy",
        failure_type="rate_limited",
    )
    version = save_policy_change(override, None)
    wait_for_version(web, api.headers["Authorization"].removeprefix("Bearer "), version)
    failure = {
        "status": "error",
        "failure_type": "server_fault",
        "agent": "indexer",
        "source": SOURCE,
        "status_code": 503,
        "provider_code": "CatalogBusy",
        "exception_type": "catalog.ServiceError",
        "chain": ["catalog.ServiceError: busy"],
    }
    other_source = failure | {"source": "news_api"}
    response = api.post("/runs/batch", json={"runs": [failure, other_source]})
    ids = [item["id"] for item in response.json()["results"]]
    runs = {run.source: run for run in Run.objects.filter(pk__in=ids)}
    assert runs[SOURCE].failure_type == "rate_limited"
    assert runs[SOURCE].reported_failure_type == "server_fault"
    assert runs["news_api"].failure_type == "server_fault"  # the override is the catalog's
    assert {run.classified_policy_version for run in runs.values()} == {version}

    started = created(api.post("/runs", json={"status": "running", "source": SOURCE}))
    finish = {k: v for k, v in failure.items() if k not in ("agent", "source")}
    finished = api.patch(f"/runs/{started['id']}", json=finish | {"classified_policy_version": 1})
    assert finished.status_code == 200, finished.text
    assert finished.json()["failure_type"] == "rate_limited"
    assert finished.json()["classified_policy_version"] == version
