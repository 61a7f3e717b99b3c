"""The OpenAPI document tells the truth: each status an operation answers is listed for it (read
from the generated schema, checked against real answers), /classify documents every key it
reads; and every answer, errors included, carries X-Policy-Version."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.test import Client, override_settings

from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import PolicyState, ProviderOverride, Run, Workflow
from tests.api.helpers import post_json

API = "/api/v1"
OK_RUN = {"status": "ok", "agent": "a", "source": "s"}


@pytest.fixture(scope="module")
def schema(django_db_setup, django_db_blocker) -> dict[str, Any]:
    # Generated once for the module: the tests only read it.
    with django_db_blocker.unblock():
        return json.loads(Client().get(f"{API}/openapi.json").content)


@pytest.fixture
def ids(db, api_token) -> dict[str, int]:
    """A run and a workflow of the test's token (another token's are a 404: test_permissions)."""
    token = api_token[0]
    run = Run.objects.create(agent="a", source="s", status=Run.Status.SUCCEEDED, token=token)
    wf = Workflow.objects.create(name="w", topics=["film"], capability="news", token=token)
    return {"run": run.pk, "workflow": wf.pk}


def call(client, headers, method: str, path: str, body: Any = None, **extra: str):
    if method == "get":
        return client.get(API + path, body or {}, **headers, **extra)
    if isinstance(body, str):
        return client.post(API + path, body, content_type="application/json", **headers, **extra)
    return post_json(client, path, body, **headers, **extra)


# (method, operation path, request path, body, expected status). "{run}" and "{workflow}" are
# filled with ids of stored rows; bodies are JSON values, or raw text when a str.
ANSWERS = [
    ("post", "/runs", "/runs", OK_RUN, 201),
    ("post", "/runs", "/runs", "{", 400),
    ("post", "/runs", "/runs", {"status": "maybe"}, 422),
    ("post", "/runs/batch", "/runs/batch", {"runs": [OK_RUN]}, 200),
    ("post", "/runs/batch", "/runs/batch", "[1,", 400),
    ("post", "/runs/batch", "/runs/batch", {"runs": 3}, 422),
    ("get", "/runs", "/runs", {"status": "ok"}, 200),
    ("get", "/runs", "/runs", {"failure_type": "cosmic"}, 422),
    ("get", "/runs/{run_id}", "/runs/{run}", None, 200),
    ("get", "/runs/{run_id}", "/runs/999999", None, 404),
    ("get", "/policies", "/policies", None, 200),
    (
        "post",
        "/decisions",
        "/decisions",
        {"failure": {"failure_type": "timeout"}, "source": "s"},
        200,
    ),
    ("post", "/decisions", "/decisions", "nope", 400),
    (
        "post",
        "/decisions",
        "/decisions",
        {"failure": {"failure_type": "timeout"}, "source": "s", "workflow": 999999},
        404,
    ),
    ("post", "/decisions", "/decisions", {"failure": {}, "source": "s"}, 422),
    ("post", "/classify", "/classify", {"status_code": 429}, 200),
    ("post", "/classify", "/classify", "{'single': 'quotes'}", 400),
    ("post", "/classify", "/classify", {"isError": False}, 422),
    (
        "post",
        "/workflows",
        "/workflows",
        {"name": "w", "topics": ["film"], "capability": "news"},
        201,
    ),
    ("post", "/workflows", "/workflows", '{"name": "w",}', 400),
    ("post", "/workflows", "/workflows", {"name": "w", "topics": [], "capability": "news"}, 422),
    ("get", "/workflows/{workflow_id}", "/workflows/{workflow}", None, 200),
    ("get", "/workflows/{workflow_id}", "/workflows/999999", None, 404),
    ("get", "/workflows/{workflow_id}/coverage", "/workflows/{workflow}/coverage", None, 200),
    ("get", "/workflows/{workflow_id}/coverage", "/workflows/999999/coverage", None, 404),
    ("post", "/otlp/v1/traces", "/otlp/v1/traces", {"resourceSpans": []}, 200),
    ("post", "/otlp/v1/traces", "/otlp/v1/traces", "{", 400),
]


@pytest.mark.parametrize(("method", "operation", "path", "body", "status"), ANSWERS)
def test_each_status_an_operation_answers_is_in_the_openapi_document(
    client, auth_headers, schema, ids, method, operation, path, body, status
):
    response = call(client, auth_headers, method, path.format(**ids), body)
    assert response.status_code == status, response.content
    documented = schema["paths"][API + operation][method]["responses"]
    assert str(status) in documented, (method, operation, sorted(documented))


def test_the_common_refusals_are_documented_where_they_happen(
    client, auth_headers, schema, ids, monkeypatch, settings
):
    # 401 without a token, 413 over the body limit, 429 over the rate limit, 503 without a
    # database: answered by every operation (413 by those with a body), documented likewise.
    operations = {(m, API + op) for m, op, *_ in ANSWERS}
    for method, operation in operations:
        documented = schema["paths"][operation][method]["responses"]
        assert {"401", "429", "500", "503"} <= set(documented), (method, operation)
    assert call(client, {}, "get", "/policies").status_code == 401
    with override_settings(API_MAX_BODY_BYTES=64, DATA_UPLOAD_MAX_MEMORY_SIZE=None):
        big = {"status": "ok", "agent": "a" * 80, "source": "s"}
        assert call(client, auth_headers, "post", "/runs", big).status_code == 413
    settings.API_RATE_LIMIT_PER_MINUTE = 1
    call(client, auth_headers, "get", "/policies")
    assert call(client, auth_headers, "get", "/policies").status_code == 429
    settings.API_RATE_LIMIT_PER_MINUTE = 0

    def refuse(*args, **kwargs):
        raise OperationalError("connection refused")

    with monkeypatch.context() as patch:
        patch.setattr(connection, "cursor", refuse)
        down = call(client, auth_headers, "post", "/classify", {"status_code": 500})
    assert down.status_code == 503
    assert "X-Policy-Version" not in down  # no database, no version to tell


def test_classify_documents_every_key_it_reads_with_examples(schema):
    components = schema["components"]["schemas"]
    body = schema["paths"][f"{API}/classify"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"]["$ref"].endswith("/ClassifyIn")
    classify_in = components["ClassifyIn"]
    described = {
        "exception_type",
        "message",
        "status_code",
        "headers",
        "provider_code",
        "error_code",
        "grpc_status",
        "sqlstate",
        "retryable",
        "retry_after",
        "failure_type",
        "cause",
        "context",
    }
    mcp = {"isError", "content", "structuredContent", "_meta", "errorCategory", "isRetryable"}
    assert described | mcp | {"provider", "code"} <= set(classify_in["properties"])
    assert classify_in["additionalProperties"] is False
    examples = classify_in["examples"]
    assert any("isError" in e and "structuredContent" in e for e in examples)
    assert any("cause" in e for e in examples)
    cause = json.dumps(classify_in["properties"]["cause"])
    assert "DescribedErrorIn" in cause
    assert described <= set(components["DescribedErrorIn"]["properties"])
    for prop in ("status_code", "headers", "provider_code", "exception_type"):
        assert components["DescribedErrorIn"]["properties"][prop].get("examples"), prop


def test_the_failure_type_fields_document_the_aliases(schema):
    run_in = schema["components"]["schemas"]["RunIn"]["properties"]["failure_type"]
    text = json.dumps(run_in, ensure_ascii=False)
    assert "auth_error → auth_failure" in text and "unknown → unclassified" in text


# ---------------------------------------------------------------------------------------------
# X-Policy-Version


def test_every_answer_carries_the_policy_version(client, auth_headers, ids, settings):
    # Each process remembers the version a few seconds: an earlier test's rolled-back edit would
    # still be announced here.
    settings.POLICY_VERSION_CACHE_SECONDS = 0
    version = str(PolicyState.current_version())
    answers = [
        call(client, auth_headers, "get", "/policies"),  # 200
        call(client, auth_headers, "post", "/runs", OK_RUN),  # 201
        call(client, auth_headers, "post", "/runs", "{"),  # 400
        call(client, {}, "get", "/runs"),  # 401
        call(client, auth_headers, "get", "/runs/999999"),  # 404 from an operation
        call(client, auth_headers, "get", "/no-such-endpoint"),  # 404 outside the routes
        client.delete(f"{API}/runs", **auth_headers),  # 405
        call(client, auth_headers, "post", "/runs", {"status": "maybe"}),  # 422
        client.get(f"{API}/openapi.json"),
    ]
    for response in answers:
        assert response["X-Policy-Version"] == version, (response.status_code, response.content)
    assert sorted({r.status_code for r in answers}) == [200, 201, 400, 401, 404, 405, 422]


def test_the_header_moves_when_an_operator_edits_a_policy(client, auth_headers, policy_editor):
    before = int(call(client, auth_headers, "get", "/runs")["X-Policy-Version"])
    override = ProviderOverride(
        match_on="status_code", match_value="499", failure_type="rate_limited"
    )
    save_policy_change(override, policy_editor)
    after = call(client, auth_headers, "get", "/runs")
    assert int(after["X-Policy-Version"]) == before + 1
    policies = call(client, auth_headers, "get", "/policies").json()
    assert policies["version"] == before + 1


def test_a_run_says_which_run_a_switch_started_it_in_place_of(
    client, auth_headers, api_token, schema
):
    field = schema["components"]["schemas"]["RunOut"]["properties"]["switched_from"]
    assert {"type": "integer"} in field["anyOf"] and "switch of source" in field["description"]
    api_token[0].set_scopes(["read:all"])  # the built-in coordinator's runs (no token)
    failed = Run.objects.create(
        agent="a", source="web_search", status=Run.Status.FAILED, failure_type="resource_missing"
    )
    replacement = Run.objects.create(agent="a", source="news_api", switched_from=failed)
    assert call(client, auth_headers, "get", f"/runs/{replacement.pk}").json()["switched_from"] == (
        failed.pk
    )
    assert call(client, auth_headers, "get", f"/runs/{failed.pk}").json()["switched_from"] is None
    listed = call(client, auth_headers, "get", "/runs", {"source": "news_api"}).json()
    assert [r["switched_from"] for r in listed["items"]] == [failed.pk]
