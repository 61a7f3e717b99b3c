"""POST /api/v1/otlp/v1/traces: spans of an agent instrumented with the real OpenTelemetry SDK,
encoded by the SDK's own OTLP encoder, become runs with the right failure type; exporter retries
store nothing twice; what is not OTLP gets our error envelope. (The real exporter over HTTP into
a live server: test_otlp_live.py.)"""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from orchestrator.models import ApiToken, Run
from tests.api import otel
from tests.api.helpers import assert_envelope

URL = "/api/v1/otlp/v1/traces"
PROTOBUF = "application/x-protobuf"


@pytest.fixture(scope="module")
def trace() -> list:
    return otel.research_trace()


def export(client, headers, body: bytes | str, content_type: str = PROTOBUF, **extra):
    return client.post(URL, data=body, content_type=content_type, **headers, **extra)


def answer(response) -> ExportTraceServiceResponse:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == PROTOBUF
    return ExportTraceServiceResponse.FromString(response.content)


def run_of(span) -> Run:
    trace_id, span_id = otel.ids(span)
    return Run.objects.get(trace_id=trace_id, span_id=span_id)


def test_a_tool_call_failing_with_a_429_is_rate_limited_with_its_retry_after(
    client, auth_headers, trace
):
    assert not answer(export(client, auth_headers, otel.protobuf_body(trace))).HasField(
        "partial_success"
    )
    run = run_of(otel.named(trace, "execute_tool web_search"))
    assert (run.status, run.failure_type) == ("failed", "rate_limited")
    assert (run.status_code, run.retry_after, run.retryable) == (429, 7.0, True)
    assert (run.agent, run.source, run.operation) == (otel.AGENT, "web_search", "execute_tool")
    assert run.exception_type.endswith("HTTPStatusError") or "HTTPStatusError" in run.detail
    assert "Traceback (most recent call last)" in run.detail  # the event's stack trace is kept
    # The HTTP span under it carried the 429: it explains the tool's failure, it is not a second
    # failure of its own.
    http = otel.named(trace, "GET")
    assert not Run.objects.filter(span_id=otel.ids(http)[1]).exists()


def test_a_model_call_timing_out_is_a_timeout_of_its_provider(client, auth_headers, trace):
    answer(export(client, auth_headers, otel.protobuf_body(trace)))
    run = run_of(otel.named(trace, "chat gpt-4o"))
    assert (run.status, run.failure_type, run.retryable) == ("failed", "timeout", True)
    assert (run.source, run.operation, run.agent) == ("openai", "chat", otel.AGENT)
    assert run.attempted["model"] == "gpt-4o" and run.attempted["server"] == "api.openai.com"
    assert "APITimeoutError" in run.exception_type


def test_an_exception_event_of_a_refused_connection_is_transient(client, auth_headers, trace):
    answer(export(client, auth_headers, otel.protobuf_body(trace)))
    run = run_of(otel.named(trace, "query internal_db"))
    assert (run.status, run.failure_type, run.retryable) == ("failed", "transient", True)
    assert run.exception_type.endswith("ConnectionRefusedError")
    assert run.detail.startswith("ConnectionRefusedError:")
    assert "create_connection" in run.detail  # from the stack trace the SDK recorded
    assert run.agent == otel.AGENT  # the nearest agent span above it names it


def test_successful_genai_spans_are_runs_and_plain_spans_are_skipped(client, auth_headers, trace):
    answer(export(client, auth_headers, otel.protobuf_body(trace)))
    news = run_of(otel.named(trace, "execute_tool news_api"))
    assert (news.status, news.failure_type, news.result_count) == ("succeeded", None, 1)
    assert news.results[0]["result"] == '[{"title": "AI in film"}]'
    agent = run_of(otel.named(trace, f"invoke_agent {otel.AGENT}"))
    assert (agent.status, agent.source, agent.operation) == (
        "succeeded",
        otel.AGENT,
        "invoke_agent",
    )
    # agent, two tools, one model call, one failed plain span; the HTTP span and "format report"
    # are not runs.
    assert Run.objects.count() == 5
    assert not Run.objects.filter(operation="format report").exists()


def test_an_export_larger_than_one_batch_is_stored_in_several(
    client, auth_headers, trace, settings
):
    settings.API_MAX_BATCH = 2
    answer(export(client, auth_headers, otel.protobuf_body(trace)))
    assert Run.objects.count() == 5


def test_a_repeated_export_stores_each_span_once(client, auth_headers, trace):
    body = otel.protobuf_body(trace)
    answer(export(client, auth_headers, body))
    first = dict(Run.objects.values_list("span_id", "id"))
    again = answer(export(client, auth_headers, body))
    assert not again.HasField("partial_success")
    assert dict(Run.objects.values_list("span_id", "id")) == first


def test_the_json_encoding_with_hex_ids_gives_the_same_runs(client, auth_headers, trace):
    response = export(client, auth_headers, json.dumps(otel.json_body(trace)), "application/json")
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/json"
    assert response.json() == {}  # fully accepted
    assert run_of(otel.named(trace, "execute_tool web_search")).failure_type == "rate_limited"
    assert run_of(otel.named(trace, "chat gpt-4o")).failure_type == "timeout"
    # The same spans again in protobuf: one run per span whatever the encoding.
    answer(export(client, auth_headers, otel.protobuf_body(trace)))
    assert Run.objects.count() == 5


@pytest.mark.parametrize(
    ("encoding", "compress"), [("gzip", gzip.compress), ("deflate", zlib.compress)]
)
def test_compressed_bodies_are_read(client, auth_headers, trace, encoding, compress):
    body = compress(otel.protobuf_body(trace))
    answer(export(client, auth_headers, body, HTTP_CONTENT_ENCODING=encoding))
    assert Run.objects.count() == 5


def _spans(build) -> list:
    memory = InMemorySpanExporter()
    provider = otel.tracer_provider(SimpleSpanProcessor(memory))
    build(provider.get_tracer("t"))
    provider.shutdown()
    return list(memory.get_finished_spans())


def test_an_error_type_alias_is_read_as_its_category_and_kept_as_sent(client, auth_headers):
    def build(tracer):
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.system": "anthropic"}
        with tracer.start_as_current_span("chat claude", attributes=attrs) as span:
            span.set_attribute("error.type", "rate_limit_error")
            span.set_status(Status(StatusCode.ERROR, "rate limited by the provider"))

    spans = _spans(build)
    answer(export(client, auth_headers, otel.protobuf_body(spans)))
    run = run_of(spans[0])
    assert (run.failure_type, run.reported_failure_type) == ("rate_limited", "rate_limit_error")
    assert run.source == "anthropic" and "rate limited by the provider" in run.detail


def test_a_span_whose_status_is_ok_is_a_success_despite_a_recorded_exception(client, auth_headers):
    def build(tracer):
        tool = {"gen_ai.tool.name": "scholar_api"}
        with tracer.start_as_current_span("execute_tool scholar_api", attributes=tool) as span:
            span.record_exception(TimeoutError("first try timed out"))  # recovered locally
            span.set_status(Status(StatusCode.OK))

    spans = _spans(build)
    answer(export(client, auth_headers, otel.protobuf_body(spans)))
    assert run_of(spans[0]).status == "succeeded"


def test_a_failed_span_of_its_own_uses_http_status_and_server_address(client, auth_headers):
    def build(tracer):
        http = {"server.address": "maps.example", "http.response.status_code": 401}
        with tracer.start_as_current_span("GET /tiles", attributes=http) as span:
            span.set_status(Status(StatusCode.ERROR))

    spans = _spans(build)
    answer(export(client, auth_headers, otel.protobuf_body(spans)))
    run = run_of(spans[0])
    assert (run.failure_type, run.status_code, run.retryable) == ("auth_failure", 401, False)
    assert (run.source, run.agent, run.operation) == ("maps.example", otel.SERVICE, "GET /tiles")


def test_a_stored_span_sent_with_other_content_is_refused_in_partial_success(
    client, auth_headers, trace
):
    request = ExportTraceServiceRequest.FromString(otel.protobuf_body(trace))
    answer(export(client, auth_headers, request.SerializeToString()))
    spans = request.resource_spans[0].scope_spans[0].spans
    span = next(s for s in spans if s.name == "execute_tool news_api")
    span.name = "renamed"
    refused = answer(export(client, auth_headers, request.SerializeToString()))
    assert refused.partial_success.rejected_spans == 1
    assert "already used for a different" in refused.partial_success.error_message
    assert span.span_id.hex() in refused.partial_success.error_message
    assert Run.objects.count() == 5


def test_spans_with_invalid_ids_are_refused_and_the_others_stored(client, auth_headers, trace):
    request = ExportTraceServiceRequest.FromString(otel.protobuf_body(trace))
    spans = request.resource_spans[0].scope_spans[0].spans
    broken = next(s for s in spans if s.name == "chat gpt-4o")
    broken.span_id = b"\x00" * 8
    response = answer(export(client, auth_headers, request.SerializeToString()))
    assert response.partial_success.rejected_spans == 1
    assert "invalid trace_id or span_id" in response.partial_success.error_message
    assert Run.objects.count() == 4


def test_a_partial_success_answers_in_json_to_json(client, auth_headers, trace):
    body = otel.json_body(trace)
    body["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "0" * 16
    response = export(client, auth_headers, json.dumps(body), "application/json")
    parsed = json_format.Parse(response.content, ExportTraceServiceResponse())
    assert parsed.partial_success.rejected_spans == 1


@pytest.mark.parametrize(
    ("body", "content_type", "extra"),
    [
        (b"\x0a\xff\xff\xff", PROTOBUF, {}),  # a length prefix running past the end
        (b"not json", "application/json", {}),
        ('{"resourceSpans": 3}', "application/json", {}),
        (
            '{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "xyz"}]}]}]}',
            "application/json",
            {},
        ),
        (b"\x1f\x8b\x08garbage", PROTOBUF, {"HTTP_CONTENT_ENCODING": "gzip"}),
        (gzip.compress(b"\x0a\x05", mtime=0)[:-8], PROTOBUF, {"HTTP_CONTENT_ENCODING": "gzip"}),
    ],
)
def test_a_malformed_payload_is_a_400_envelope(client, auth_headers, body, content_type, extra):
    response = export(client, auth_headers, body, content_type, **extra)
    assert_envelope(response, 400, "invalid_input")
    assert Run.objects.count() == 0


def test_other_media_types_and_encodings_are_a_415_envelope(client, auth_headers, trace):
    assert_envelope(export(client, auth_headers, b"x", "text/plain"), 415, "invalid_input")
    response = export(client, auth_headers, otel.protobuf_body(trace), HTTP_CONTENT_ENCODING="br")
    assert_envelope(response, 415, "invalid_input")


def test_a_body_inflating_past_the_limit_is_a_413(client, auth_headers, settings):
    settings.API_MAX_BODY_BYTES = 10_000
    bomb = gzip.compress(b"\x00" * 1_000_000)  # 1 kB on the wire, a megabyte inflated
    response = export(client, auth_headers, bomb, HTTP_CONTENT_ENCODING="gzip")
    assert_envelope(response, 413, "invalid_input")


def test_a_token_is_required(client, trace, db):
    assert_envelope(export(client, {}, otel.protobuf_body(trace)), 401, "auth_failure")
    wrong = {"HTTP_AUTHORIZATION": "Bearer fs_not_a_token"}
    assert_envelope(export(client, wrong, otel.protobuf_body(trace)), 401, "auth_failure")
    assert Run.objects.count() == 0


def test_spans_are_idempotent_per_token(client, auth_headers, trace, db):
    # As every idempotency key: two tokens exporting the same span are two reporters.
    answer(export(client, auth_headers, otel.protobuf_body(trace)))
    _, other = ApiToken.issue("collector")
    answer(export(client, {"HTTP_AUTHORIZATION": f"Bearer {other}"}, otel.protobuf_body(trace)))
    assert Run.objects.count() == 10


def test_runs_of_one_trace_are_listed_by_trace_id(client, auth_headers, trace):
    answer(export(client, auth_headers, otel.protobuf_body(trace)))
    Run.objects.create(agent="a", source="s", status=Run.Status.SUCCEEDED)  # not in the trace
    trace_id, _ = otel.ids(trace[0])
    response = client.get("/api/v1/runs", {"trace_id": trace_id.upper()}, **auth_headers)
    items = response.json()["items"]
    assert len(items) == 5 and {item["trace_id"] for item in items} == {trace_id}
    assert all(len(item["span_id"]) == 16 for item in items)
    bad = client.get("/api/v1/runs", {"trace_id": "xyz"}, **auth_headers)
    assert_envelope(bad, 422, "invalid_input")
