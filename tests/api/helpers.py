"""Helpers for the API tests: request builders, sample runs, and the error envelope's check."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.test import Client

from tests.orchestrator.test_worker import database_url

ENVELOPE_KEYS = {
    "status",
    "failure_type",
    "retryable",
    "retry_after",
    "detail",
    "errors",
    "attempted",
    "partial_results",
    "alternatives",
}


def ok_run(**fields: Any) -> dict[str, Any]:
    return {
        "status": "ok",
        "agent": "researcher",
        "source": "web_search",
        "attempted": {"operation": "web_search", "query": "AI impact on film"},
        "results": [{"url": "https://example.org/a", "excerpt": "…"}],
        **fields,
    }


def failed_run(**fields: Any) -> dict[str, Any]:
    return {
        "status": "error",
        "failure_type": "timeout",
        "retryable": True,
        "retry_after": 2.0,
        "agent": "researcher",
        "source": "news_api",
        "attempted": {"operation": "search", "query": "AI impact on music"},
        "partial_results": [{"url": "https://example.org/b"}],
        "alternatives": ["use web_search instead"],
        "detail": "ReadTimeout: read timed out after 10 s",
        "chain": ["httpx.ReadTimeout", "TimeoutError"],
        **fields,
    }


def post_json(client: Client, path: str, body: Any, **headers: str) -> Any:
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    return client.post(f"/api/v1{path}", data=data, content_type="application/json", **headers)


def assert_envelope(response: Any, status: int, failure_type: str) -> dict[str, Any]:
    """Check that `response` is our error envelope with this status and failure type."""
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert set(body) == ENVELOPE_KEYS
    assert body["status"] == "error"
    assert body["failure_type"] == failure_type
    assert isinstance(body["retryable"], bool)
    assert body["attempted"]["operation"].split(" ", 1)[0] == response.request["REQUEST_METHOD"]
    assert body["detail"]
    return body


def error_paths(body: dict[str, Any]) -> set[str]:
    return {error["path"] for error in body["errors"]}


def web_env(var: Path, **settings: str) -> dict[str, str]:
    """The environment of the web server an API test starts: the suite's database,
    DEBUG off, no rate limit, `var` for its files; `settings` on top."""
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "DATABASE_URL": database_url(),
        "DEBUG": "0",
        "SECRET_KEY": "test-only-secret-" + "w" * 48,
        "ALLOWED_HOSTS": "127.0.0.1",
        "FAILSIGHT_VAR_DIR": str(var),
        "API_RATE_LIMIT_PER_MINUTE": "0",
        **settings,
    }
