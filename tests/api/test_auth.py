"""Every endpoint refuses a missing, unknown or revoked token, and throttles per token."""

from __future__ import annotations

import json
import re

import pytest
import time_machine
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from orchestrator.models import ApiToken, Run
from tests.api.helpers import assert_envelope, ok_run

# Every operation of the API, with a body that would be accepted with a valid token.
ENDPOINTS = [
    ("post", "/api/v1/runs", ok_run()),
    ("post", "/api/v1/runs/batch", {"runs": [ok_run(idempotency_key="k1")]}),
    ("get", "/api/v1/runs", None),
    ("get", "/api/v1/runs/1", None),
    ("get", "/api/v1/policies", None),
]
ENDPOINT_IDS = [f"{method} {path}" for method, path, _ in ENDPOINTS]
TRANSACTION_CONTROL = {"BEGIN", "COMMIT", "SAVEPOINT", "RELEASE"}


def call(client: Client, method: str, path: str, body: object, **headers: str):
    if body is None:
        return getattr(client, method)(path, **headers)
    return getattr(client, method)(
        path, data=json.dumps(body), content_type="application/json", **headers
    )


@pytest.fixture
def revoked_headers(db) -> dict[str, str]:
    token, secret = ApiToken.issue("retired-agent")
    token.revoke()
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS, ids=ENDPOINT_IDS)
def test_every_endpoint_refuses_a_request_without_a_token(client, db, method, path, body):
    body = assert_envelope(call(client, method, path, body), 401, "auth_failure")
    assert body["retryable"] is False
    assert Run.objects.count() == 0


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS, ids=ENDPOINT_IDS)
@pytest.mark.parametrize(
    "header", ["Bearer fs_not-a-real-token", "Basic dXNlcjpwYXNz", "Bearer", "fs_no_scheme"]
)
def test_every_endpoint_refuses_an_unknown_token(client, db, method, path, body, header):
    response = call(client, method, path, body, HTTP_AUTHORIZATION=header)
    assert_envelope(response, 401, "auth_failure")
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS, ids=ENDPOINT_IDS)
def test_every_endpoint_refuses_a_revoked_token(client, revoked_headers, method, path, body):
    assert_envelope(call(client, method, path, body, **revoked_headers), 401, "auth_failure")
    assert Run.objects.count() == 0


def test_a_valid_token_is_accepted_and_its_last_use_recorded(client, api_token, auth_headers):
    response = client.get("/api/v1/policies", **auth_headers)
    assert response.status_code == 200
    api_token[0].refresh_from_db()
    assert api_token[0].last_used_at is not None


@override_settings(API_RATE_LIMIT_PER_MINUTE=3)
def test_it_answers_429_with_retry_after_once_a_token_exceeds_its_rate(client, auth_headers):
    with time_machine.travel("2025-01-01T12:00:40Z", tick=False):
        for _ in range(3):
            assert client.get("/api/v1/policies", **auth_headers).status_code == 200
        response = client.get("/api/v1/policies", **auth_headers)
    body = assert_envelope(response, 429, "rate_limited")
    assert body["retryable"] is True
    assert body["retry_after"] == pytest.approx(20)
    assert response["Retry-After"] == "20"


@override_settings(API_RATE_LIMIT_PER_MINUTE=1)
def test_the_rate_limit_is_per_token_and_resets_each_minute(client, auth_headers):
    _, other_secret = ApiToken.issue("other-agent")
    other = {"HTTP_AUTHORIZATION": f"Bearer {other_secret}"}
    with time_machine.travel("2025-01-01T12:00:10Z", tick=False) as clock:
        assert client.get("/api/v1/policies", **auth_headers).status_code == 200
        assert client.get("/api/v1/policies", **auth_headers).status_code == 429
        assert client.get("/api/v1/policies", **other).status_code == 200
        clock.shift(60)
        assert client.get("/api/v1/policies", **auth_headers).status_code == 200


@override_settings(API_RATE_LIMIT_PER_MINUTE=0)
def test_a_zero_rate_limit_turns_throttling_off(client, auth_headers):
    for _ in range(20):
        assert client.get("/api/v1/policies", **auth_headers).status_code == 200


def schema_operations() -> list[tuple[str, str]]:
    """Every operation the API documents, whichever router mounted it, with ids filled in."""
    from orchestrator.api import api

    schema = api.get_openapi_schema(path_prefix="/api/v1/")
    return [
        (method, re.sub(r"\{[^}]+\}", "1", path))
        for path, operations in schema["paths"].items()
        for method in operations
    ]


@pytest.mark.parametrize(("method", "path"), schema_operations())
def test_every_documented_operation_requires_a_token(client, db, method, path):
    # Covers routers added later too: auth is set once on the API, never per router.
    response = call(client, method, path, {} if method in ("post", "put", "patch") else None)
    assert_envelope(response, 401, "auth_failure")


class Clock:
    """Stands in for the per-process memo's monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@override_settings(API_TOKEN_CACHE_SECONDS=5)
def test_a_token_revoked_here_is_refused_at_once_though_it_was_remembered(client, api_token):
    token, secret = api_token
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    assert client.get("/api/v1/policies", **headers).status_code == 200  # now remembered
    token.revoke()
    assert_envelope(client.get("/api/v1/policies", **headers), 401, "auth_failure")


@override_settings(API_TOKEN_CACHE_SECONDS=5)
def test_a_token_revoked_by_another_process_is_refused_once_its_entry_expires(
    client, api_token, monkeypatch
):
    from django.utils import timezone

    from orchestrator import memo

    clock = Clock()
    monkeypatch.setattr(memo, "clock", clock)
    token, secret = api_token
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    assert client.get("/api/v1/policies", **headers).status_code == 200
    # Another process revokes it: this process's memo is not told.
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    clock.now += 4
    assert client.get("/api/v1/policies", **headers).status_code == 200  # within the 5 s
    clock.now += 2
    assert_envelope(client.get("/api/v1/policies", **headers), 401, "auth_failure")


@override_settings(API_TOKEN_CACHE_SECONDS=5)
def test_a_remembered_token_costs_no_lookup(client, api_token, frozen_memos):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {api_token[1]}"}
    client.post(
        "/api/v1/runs", data=json.dumps(ok_run()), content_type="application/json", **headers
    )
    # The token and the policy version are remembered: what is left is the insert itself in its
    # transaction. SQLite's is one INSERT; PostgreSQL's COPY goes through psycopg's own cursor,
    # which Django does not capture.
    with CaptureQueriesContext(connection) as queries:
        response = client.post(
            "/api/v1/runs", data=json.dumps(ok_run()), content_type="application/json", **headers
        )
    assert response.status_code == 201
    read = " ".join(q["sql"] for q in queries.captured_queries)
    assert "orchestrator_apitoken" not in read and "orchestrator_policystate" not in read, read
    statements = [q["sql"].split() for q in queries.captured_queries]
    writes = [" ".join(words[:3]) for words in statements if words[0] not in TRANSACTION_CONTROL]
    insert = [] if connection.vendor == "postgresql" else ['INSERT INTO "orchestrator_run"']
    # ...and what it tells its source: one conditional update, which writes nothing while the
    # source is healthy (every report feeds the breaker, a success resets it).
    assert writes == [*insert, 'UPDATE "orchestrator_sourcehealth" SET'], read
    assert Run.objects.filter(pk=response.json()["id"]).exists()
