"""Spans of the real OpenTelemetry SDK carrying the GenAI usage attributes become runs with their
usage and a cost priced from the price table at the span's start, a failed model call's too."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from orchestrator import pricing
from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import Price, Run
from tests.api import otel
from tests.api.test_otlp import answer, export, run_of

pytestmark = pytest.mark.django_db

FEB = datetime(2026, 2, 1, 12, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _prices():
    pricing.forget()
    price = Price(
        kind="model", name="gpt-4o-2024-08-06", effective_from=datetime(2026, 1, 1, tzinfo=UTC)
    )
    price.input_per_million, price.output_per_million = Decimal("2.50"), Decimal("10.00")
    price.cached_per_million = Decimal("1.25")
    save_policy_change(price, actor=None)
    yield
    pricing.forget()


def spans_of(build) -> list:
    memory = InMemorySpanExporter()
    provider = otel.tracer_provider(SimpleSpanProcessor(memory))
    build(provider.get_tracer("research-agent"))
    provider.shutdown()
    return list(memory.get_finished_spans())


CHAT = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "openai",
    "gen_ai.request.model": "gpt-4o",
    "server.address": "api.openai.com",
}


def test_a_chat_span_with_usage_becomes_a_run_with_its_priced_cost(client, auth_headers):
    def build(tracer):
        start = int(FEB.timestamp() * 1e9)
        with tracer.start_as_current_span(
            "chat gpt-4o", kind=SpanKind.CLIENT, attributes=CHAT, start_time=start
        ) as span:
            span.set_attribute("gen_ai.response.model", "gpt-4o-2024-08-06")
            span.set_attribute("gen_ai.usage.input_tokens", 1234)
            span.set_attribute("gen_ai.usage.output_tokens", 567)
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", 200)

    spans = spans_of(build)
    answer(export(client, auth_headers, otel.protobuf_body(spans)))
    run = run_of(spans[0])
    assert (run.input_tokens, run.output_tokens, run.cached_tokens) == (1234, 567, 200)
    assert run.model == "gpt-4o-2024-08-06"  # the model that answered, not the one asked for
    # (1,034 x 2.50 + 200 x 1.25 + 567 x 10.00) / 10^6
    assert (run.cost, run.cost_currency, run.cost_source) == (Decimal("0.008505"), "USD", "priced")
    body = client.get(f"/api/v1/runs/{run.pk}", **auth_headers).json()
    assert body["cost"] == {"amount": "0.008505", "currency": "USD", "source": "priced"}


def test_a_failed_model_call_keeps_the_usage_its_span_reported(client, auth_headers):
    def build(tracer):
        start = int(FEB.timestamp() * 1e9)
        attrs = CHAT | {"gen_ai.request.model": "gpt-4o-2024-08-06", "error.type": "timeout"}
        with tracer.start_as_current_span(
            "chat gpt-4o", kind=SpanKind.CLIENT, attributes=attrs, start_time=start
        ) as span:
            span.set_attribute("gen_ai.usage.input_tokens", 4000)
            span.set_status(Status(StatusCode.ERROR, "the stream stopped after the prompt"))

    spans = spans_of(build)
    answer(export(client, auth_headers, otel.protobuf_body(spans)))
    run = run_of(spans[0])
    assert run.status == Run.Status.FAILED and run.failure_type == "timeout"
    assert (run.input_tokens, run.output_tokens, run.model) == (4000, None, "gpt-4o-2024-08-06")
    assert run.cost == Decimal("0.010000")  # 4,000 x 2.50 / 10^6: what the failure cost


def test_a_span_without_token_counts_has_no_usage_and_no_cost(client, auth_headers):
    def build(tracer):
        with tracer.start_as_current_span("chat gpt-4o", attributes=CHAT) as span:
            span.set_attribute("gen_ai.usage.input_tokens", -5)  # not a count: left out

    spans = spans_of(build)
    answer(export(client, auth_headers, otel.protobuf_body(spans)))
    run = run_of(spans[0])
    assert (run.input_tokens, run.model, run.cost) == (None, "", None)
