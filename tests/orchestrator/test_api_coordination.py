"""POST /decisions, POST /classify, workflows and their coverage, through the real API."""

from __future__ import annotations

import pytest

from orchestrator.coordination import workflow
from orchestrator.models import Workflow

API = "/api/v1"


def post(client, path, body, headers):
    return client.post(API + path, body, content_type="application/json", **headers)


@pytest.mark.parametrize("path", ["/decisions", "/classify", "/workflows"])
def test_an_unauthenticated_caller_is_refused(client, db, path):
    response = post(client, path, {}, {})
    assert response.status_code == 401
    assert response.json()["status"] == "error"


def test_it_decides_about_a_rate_limit_with_the_policy_version(client, auth_headers):
    failure = {"status": "error", "failure_type": "rate_limited", "retry_after": 2.0}
    response = post(
        client, "/decisions", {"failure": failure, "attempt": 1, "source": "news_api"}, auth_headers
    )
    assert response.status_code == 200
    body = response.json()
    assert body["action"] == "retry" and body["delay_seconds"] >= 2.0
    assert body["policy_version"] >= 1 and "Retry-After of 2.0 s" in body["reason"]


def test_it_never_retries_an_auth_failure_from_classify_output(client, auth_headers):
    failure = {"category": "auth_failure", "status_code": 401}
    response = post(
        client, "/decisions", {"failure": failure, "attempt": 1, "source": "ext"}, auth_headers
    )
    assert response.json()["action"] == "escalate"


def test_a_bad_decision_request_is_a_422_envelope(client, auth_headers):
    response = post(client, "/decisions", {"failure": {}, "attempt": 0, "source": ""}, auth_headers)
    assert response.status_code == 422
    assert response.json()["failure_type"] == "invalid_input"


def test_it_classifies_a_described_error(client, auth_headers):
    described = {
        "exception_type": "ToolError",
        "message": "failed",
        "cause": {
            "exception_type": "httpx.HTTPStatusError",
            "status_code": 429,
            "headers": {"Retry-After": "3"},
        },
    }
    body = post(client, "/classify", described, auth_headers).json()
    assert body["failure_type"] == "rate_limited" and body["retry_after"] == 3.0


def test_it_classifies_an_mcp_tool_error_result(client, auth_headers):
    result = {
        "isError": True,
        "content": [{"type": "text", "text": "upstream quota exceeded"}],
        "structuredContent": {"code": 429, "retryable": True, "retry_after": 5},
    }
    body = post(client, "/classify", result, auth_headers).json()
    assert body["failure_type"] == "rate_limited" and body["retry_after"] == 5.0
    not_error = post(client, "/classify", {"isError": False, "content": []}, auth_headers)
    assert not_error.status_code == 422


def test_it_starts_a_workflow_and_serves_its_coverage(client, auth_headers):
    body = {"name": "AI impact", "topics": ["film", "music"], "capability": "news"}
    response = post(client, "/workflows", body, auth_headers)
    assert response.status_code == 201
    wf_id = response.json()["id"]
    assert response.json()["status"] == "running"
    workflow.step(wf_id)
    detail = client.get(f"{API}/workflows/{wf_id}", **auth_headers).json()
    assert detail["runs"]["running"] == 2  # claimed by the step, their messages in the outbox
    cov = client.get(f"{API}/workflows/{wf_id}/coverage", **auth_headers).json()
    assert cov["final"] is False and set(cov["coverage"]) == {"film", "music"}
    Workflow.objects.filter(pk=wf_id).update(
        status="degraded", coverage={"film": {"verdict": "gap"}}, coverage_summary="1 gap"
    )
    cov = client.get(f"{API}/workflows/{wf_id}/coverage", **auth_headers).json()
    assert cov["final"] is True and cov["coverage"]["film"]["verdict"] == "gap"


def test_an_unknown_capability_or_workflow_is_refused(client, auth_headers):
    body = {"name": "x", "topics": ["film"], "capability": "astrology"}
    assert post(client, "/workflows", body, auth_headers).status_code == 422
    missing = client.get(f"{API}/workflows/999999/coverage", **auth_headers)
    assert missing.status_code == 404 and missing.json()["failure_type"] == "resource_missing"
