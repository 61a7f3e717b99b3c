"""Every failure of the API is a JSON envelope with the right status and failure type, never a 500
or an HTML page: malformed and hostile bodies, unknown URLs and methods, limits, outages."""

from __future__ import annotations

import json

import pytest
from django.db import OperationalError, connection
from django.test import override_settings

from orchestrator import ingest
from orchestrator.models import Run
from tests.api.helpers import assert_envelope, error_paths, failed_run, ok_run, post_json


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


# ---------------------------------------------------------------------------------------------
# Bodies


@pytest.mark.parametrize(
    "raw", ["{", '{"status": "ok",}', "NaN", '{"retry_after": Infinity}', "\x00", '"\\ud800"']
)
def test_a_body_that_is_not_json_is_a_400_envelope(client, auth_headers, raw):
    body = assert_envelope(post_json(client, "/runs", raw, **auth_headers), 400, "invalid_input")
    assert "not valid JSON" in body["detail"]


def test_an_empty_body_is_a_422_envelope(client, auth_headers):
    assert_envelope(post_json(client, "/runs", "", **auth_headers), 422, "invalid_input")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("attempt", "three"),
        ("attempt", 1.5),
        ("results", "none"),
        ("attempted", ["a", "list"]),
        ("retryable", "perhaps"),
        ("retry_after", -1),
        ("duration_ms", "fast"),
        ("agent", 42),
        ("chain", [{"type": "x"}]),
        ("alternatives", "one"),
        ("started_at", "yesterday"),
        ("status", "success"),
    ],
)
def test_a_wrong_type_is_a_422_naming_the_field(client, auth_headers, field, value):
    response = post_json(client, "/runs", ok_run(**{field: value}), **auth_headers)
    paths = error_paths(assert_envelope(response, 422, "invalid_input"))
    assert {path.split(".")[0] for path in paths} == {field}


def test_an_unknown_failure_type_is_a_422(client, auth_headers):
    response = post_json(client, "/runs", failed_run(failure_type="cosmic_ray"), **auth_headers)
    body = assert_envelope(response, 422, "invalid_input")
    assert error_paths(body) == {"failure_type"}
    assert "timeout" in body["errors"][0]["message"]  # the message lists the taxonomy


@pytest.mark.parametrize(
    ("field", "limit"),
    [
        ("agent", 100),
        ("source", 100),
        ("operation", 200),
        ("topic", 200),
        ("capability", 100),
        ("provider_code", 200),
        ("exception_type", 300),
    ],
)
def test_a_string_longer_than_its_column_is_a_422(client, auth_headers, field, limit):
    fits = post_json(client, "/runs", ok_run(**{field: "é" * limit}), **auth_headers)
    assert fits.status_code == 201, fits.content
    response = post_json(client, "/runs", ok_run(**{field: "é" * (limit + 1)}), **auth_headers)
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {field}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("attempt", 2**31),
        ("attempt", 10**30),
        ("attempt", 0),
        ("status_code", 2**15),
        ("status_code", -1),
        ("workflow", 2**63),
        ("retry_of", 10**40),
        ("result_count", 5),  # computed from results, never sent
    ],
)
def test_an_integer_that_would_overflow_its_column_is_a_422(client, auth_headers, field, value):
    response = post_json(client, "/runs", ok_run(**{field: value}), **auth_headers)
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {field}
    assert Run.objects.count() == 0


@override_settings(API_MAX_JSON_DEPTH=32)
@pytest.mark.parametrize("depth", [40, 5000, 100_000])
def test_deeply_nested_json_is_a_422_not_a_crash(client, auth_headers, depth):
    raw = '{"status": "ok", "agent": "a", "source": "s", "attempted": ' + "[" * depth
    raw += "]" * depth + "}"
    body = assert_envelope(post_json(client, "/runs", raw, **auth_headers), 422, "invalid_input")
    assert "deeper than 32" in body["detail"]


@override_settings(API_MAX_JSON_DEPTH=32)
def test_brackets_inside_strings_do_not_count_as_nesting(client, auth_headers):
    report = ok_run(detail="[" * 100 + '"\\' + "{" * 100, attempted=nested(20))
    response = post_json(client, "/runs", report, **auth_headers)
    assert response.status_code == 201, response.content
    assert response.json()["detail"] == report["detail"]


def test_nul_characters_are_replaced_not_refused(client, auth_headers):
    report = failed_run(
        detail="bad\x00byte",
        attempted={"q\x00": "a\x00b"},
        partial_results=[{"excerpt": "\x00"}],
        chain=["Error\x00"],
        agent="ag\x00ent",
    )
    response = post_json(client, "/runs", report, **auth_headers)
    assert response.status_code == 201, response.content
    run = Run.objects.get()
    assert run.detail == "bad\ufffdbyte"
    assert run.attempted == {"q\ufffd": "a\ufffdb"}
    assert run.partial_results == [{"excerpt": "\ufffd"}]
    assert run.exception_chain == ["Error\ufffd"]
    assert run.agent == "ag\ufffdent"


def test_nul_characters_reach_postgresql_as_replacement_characters(client, auth_headers, postgres):
    # PostgreSQL refuses U+0000 in text and jsonb: passing one through would be a 500 here.
    batch = {"runs": [ok_run(idempotency_key="k\x00", results=[{"t\x00": "\x00"}], topic="\x00")]}
    response = post_json(client, "/runs/batch", batch, **auth_headers)
    assert response.json()["results"][0]["status"] == "created", response.content
    run = Run.objects.get()
    assert (run.idempotency_key, run.topic, run.results) == (
        "k\ufffd",
        "\ufffd",
        [{"t\ufffd": "\ufffd"}],
    )
    listed = client.get("/api/v1/runs", {"topic": "\x00"}, **auth_headers)
    assert_envelope(listed, 422, "invalid_input")


def test_a_nul_in_a_query_parameter_is_a_422(client, auth_headers):
    for name in ("source", "agent", "topic", "cursor"):
        response = client.get("/api/v1/runs", {name: "x\x00"}, **auth_headers)
        assert error_paths(assert_envelope(response, 422, "invalid_input")) == {name}


# ---------------------------------------------------------------------------------------------
# Size limits


@override_settings(API_MAX_BODY_BYTES=2048, DATA_UPLOAD_MAX_MEMORY_SIZE=2048)
@pytest.mark.parametrize("path", ["/runs", "/runs/batch"])
def test_a_body_over_the_limit_is_a_413_envelope(client, auth_headers, path):
    body = (
        {"runs": [ok_run(detail="x" * 4000)]}
        if path.endswith("batch")
        else ok_run(detail="x" * 4000)
    )
    response = post_json(client, path, body, **auth_headers)
    envelope = assert_envelope(response, 413, "invalid_input")
    assert "2048 bytes" in envelope["detail"]
    assert Run.objects.count() == 0


@override_settings(API_MAX_BODY_BYTES=2048, DATA_UPLOAD_MAX_MEMORY_SIZE=None)
def test_the_api_limit_holds_even_when_django_s_own_limit_is_off(client, auth_headers):
    response = post_json(client, "/runs", ok_run(detail="x" * 4000), **auth_headers)
    assert_envelope(response, 413, "invalid_input")


# ---------------------------------------------------------------------------------------------
# URLs and methods


@pytest.mark.parametrize(
    "path",
    ["/api/v1/nothing-here", "/api/v1/runs/abc", "/api/v1/runs/1/x", "/api/v2/runs", "/api/"],
)
def test_an_unknown_url_is_a_json_404_not_an_html_page(client, auth_headers, path):
    body = assert_envelope(client.get(path, **auth_headers), 404, "resource_missing")
    assert path in body["detail"]


@pytest.mark.parametrize("debug", [True, False], ids=["debug", "production"])
@pytest.mark.parametrize(("method", "path"), [("get", "/api/v1/runs"), ("post", "/api/v1/runs")])
def test_a_host_not_allowed_is_a_400_envelope_not_an_html_page(
    client, auth_headers, settings, debug, method, path
):
    settings.DEBUG = debug
    headers = auth_headers | {"HTTP_HOST": "evil.example"}
    response = getattr(client, method)(path, data={}, content_type="application/json", **headers)
    body = assert_envelope(response, 400, "invalid_input")
    assert "evil.example" in body["detail"] and "ALLOWED_HOSTS" in body["detail"]
    page = client.get("/", HTTP_HOST="evil.example")  # a page: Django's own answer stays
    assert page.status_code == 400 and not page["Content-Type"].startswith("application/json")


def test_a_post_to_an_unknown_url_is_a_404_not_a_csrf_page(client, db):
    assert_envelope(post_json(client, "/nothing-here", {}), 404, "resource_missing")


@pytest.mark.parametrize(
    ("method", "path"),
    [("delete", "/api/v1/runs"), ("put", "/api/v1/runs/1"), ("get", "/api/v1/runs/batch")],
)
def test_a_wrong_method_is_a_405_envelope_with_allow(client, auth_headers, method, path):
    response = getattr(client, method)(path, **auth_headers)
    assert_envelope(response, 405, "invalid_input")
    assert response["Allow"]


# ---------------------------------------------------------------------------------------------
# Outages and bugs


def test_an_unreachable_database_is_a_503_with_retry_after(client, auth_headers, monkeypatch):
    # A real outage cannot be staged on the connection this test's own transaction runs on
    # (closing it would break the rollback), so the connection raises what Django raises when
    # the server refuses connections: OperationalError. Every query of the request, starting
    # with the token lookup, goes through connection.cursor().
    def refuse(*args, **kwargs):
        raise OperationalError('connection to server at "127.0.0.1", port 5432 failed')

    with monkeypatch.context() as patch:  # undone before the test's rollback needs the cursor
        patch.setattr(connection, "cursor", refuse)
        response = post_json(client, "/runs", ok_run(), **auth_headers)
    body = assert_envelope(response, 503, "server_fault")
    assert body["retryable"] is True
    assert response["Retry-After"] == "5"
    assert body["retry_after"] == 5.0


def test_an_unexpected_error_is_a_logged_500_envelope(client, auth_headers, monkeypatch, caplog):
    def explode(*args, **kwargs):
        raise RuntimeError("bug")

    monkeypatch.setattr(ingest, "accept", explode)
    response = post_json(client, "/runs", ok_run(), **auth_headers)
    body = assert_envelope(response, 500, "server_fault")
    assert "bug" not in body["detail"]  # internals stay in the log
    assert "RuntimeError: bug" in caplog.text


def test_the_error_envelope_is_documented_for_every_operation(client, db):
    schema = json.loads(client.get("/api/v1/openapi.json").content)
    assert "ErrorOut" in schema["components"]["schemas"]
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            documented = set(operation["responses"])
            assert {"401", "429", "500", "503"} <= documented, (method, path)
            if "requestBody" in operation:  # unparsable, too large, invalid
                assert {"400", "413", "422"} <= documented, (method, path)
