"""Spans of an agent instrumented with the real OpenTelemetry SDK, for the OTLP ingest tests.

`research_trace()` runs a small agent under a real TracerProvider: one agent invocation whose
tool and model calls fail the ways real ones do (exceptions raised by real libraries, recorded by
the SDK itself as `exception` events with their stack traces), with the attributes the GenAI and
HTTP semantic conventions give them. It returns the finished spans, which the tests send with the
SDK's own OTLP encoder or its OTLP/HTTP exporter. Nothing here knows how the server reads them.
"""

from __future__ import annotations

import base64
import socket
from collections.abc import Sequence
from typing import Any

import httpx
import openai
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

SERVICE = "research-service"
AGENT = "researcher"
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "web_search"}
# The HTTP client span under it: the provider's 429 with its Retry-After.
HTTP_429 = {
    "http.request.method": "GET",
    "server.address": "search.example",
    "http.response.status_code": 429,
    "http.response.header.retry-after": ("7",),
    "error.type": "429",
}


def tracer_provider(*processors: Any) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": SERVICE}))
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed once the block ends: connections are refused


def _rate_limited_search() -> None:
    """The provider answers 429 with Retry-After; the tool raises httpx's own error for it."""
    request = httpx.Request("GET", "https://search.example/v1?q=film")
    response = httpx.Response(429, headers={"Retry-After": "7"}, request=request)
    response.raise_for_status()


def _timed_out_completion() -> None:
    raise openai.APITimeoutError(request=httpx.Request("POST", "https://api.openai.com/v1/chat"))


def run_agent(provider: TracerProvider) -> None:
    """One agent invocation: a tool hitting a 429, a model call timing out, a refused
    connection, a successful tool call and a plain internal step."""
    tracer = provider.get_tracer("research-agent")
    invoke = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": AGENT}
    with tracer.start_as_current_span(f"invoke_agent {AGENT}", attributes=invoke):
        try:
            with tracer.start_as_current_span("execute_tool web_search", attributes=TOOL):
                with tracer.start_as_current_span(
                    "GET", kind=SpanKind.CLIENT, attributes=HTTP_429
                ) as s:
                    s.set_status(Status(StatusCode.ERROR))
                _rate_limited_search()
        except httpx.HTTPStatusError:
            pass  # the agent goes on: the coordinator decides later
        chat = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o",
            "server.address": "api.openai.com",
            "error.type": "openai.APITimeoutError",
        }
        try:
            with tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT, attributes=chat):
                _timed_out_completion()
        except openai.APITimeoutError:
            pass
        try:
            with tracer.start_as_current_span("query internal_db", kind=SpanKind.CLIENT):
                socket.create_connection(("127.0.0.1", refused_port()), timeout=2)
        except ConnectionRefusedError:
            pass
        news = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "news_api"}
        with tracer.start_as_current_span("execute_tool news_api", attributes=news) as span:
            span.set_attribute("gen_ai.tool.call.result", '[{"title": "AI in film"}]')
        with tracer.start_as_current_span("format report"):
            pass


def research_trace() -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = tracer_provider(SimpleSpanProcessor(memory))
    run_agent(provider)
    provider.shutdown()
    return list(memory.get_finished_spans())


def protobuf_body(spans: Sequence[ReadableSpan]) -> bytes:
    """The request body the SDK's OTLP/HTTP exporter sends (http/protobuf)."""
    return encode_spans(spans).SerializeToString()


def json_body(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    """The same request in the OTLP/JSON encoding: protobuf's JSON mapping with the trace and
    span ids in hex, as the OTLP specification requires (not protobuf's base64)."""
    data = json_format.MessageToDict(encode_spans(spans))

    def hexed(value: Any) -> Any:
        if isinstance(value, list):
            return [hexed(v) for v in value]
        if not isinstance(value, dict):
            return value
        ids = {"traceId", "spanId", "parentSpanId"}
        return {k: base64.b64decode(v).hex() if k in ids else hexed(v) for k, v in value.items()}

    return hexed(data)


def ids(span: ReadableSpan) -> tuple[str, str]:
    context = span.get_span_context()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def named(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    return next(span for span in spans if span.name == name)
