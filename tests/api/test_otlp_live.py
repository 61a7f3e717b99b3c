"""The real OpenTelemetry SDK and its real OTLP/HTTP exporter (http/protobuf, gzip) send an
instrumented agent's spans to a live server, which stores them as runs with the right failure
types; the exporter's retry of the same export stores nothing twice; without a token it is
refused. The whole path: SDK → exporter → HTTP → Django → PostgreSQL."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult

from orchestrator.models import ApiToken, Run
from tests.api import otel

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def exporter(live_server, secret: str) -> OTLPSpanExporter:
    return OTLPSpanExporter(
        endpoint=f"{live_server.url}/api/v1/otlp/v1/traces",
        headers={"Authorization": f"Bearer {secret}"},
        compression=Compression.Gzip,
        timeout=10,
    )


def outcomes() -> dict[str, tuple[str, str | None]]:
    return {
        run.operation + " " + run.source: (run.status, run.failure_type)
        for run in Run.objects.all()
    }


def test_an_instrumented_agent_exports_its_spans_as_classified_runs(live_server, postgres):
    _, secret = ApiToken.issue("otel-agent")
    provider = otel.tracer_provider(BatchSpanProcessor(exporter(live_server, secret)))
    otel.run_agent(provider)
    assert provider.force_flush(20_000)
    provider.shutdown()

    assert outcomes() == {
        "invoke_agent researcher": ("succeeded", None),
        "execute_tool web_search": ("failed", "rate_limited"),
        "chat openai": ("failed", "timeout"),
        "query internal_db query internal_db": ("failed", "transient"),
        "execute_tool news_api": ("succeeded", None),
    }
    tool = Run.objects.get(source="web_search")
    assert (tool.status_code, tool.retry_after, tool.agent) == (429, 7.0, otel.AGENT)
    assert len({run.trace_id for run in Run.objects.all()}) == 1


def test_the_exporters_retry_of_an_export_stores_each_span_once(live_server, postgres):
    _, secret = ApiToken.issue("otel-agent")
    spans = otel.research_trace()
    sender = exporter(live_server, secret)
    assert sender.export(spans) == SpanExportResult.SUCCESS
    stored = sorted(Run.objects.values_list("span_id", "id"))
    # The answer was lost on the way back (as the exporter retries after a timeout): it sends
    # the same spans again.
    assert sender.export(spans) == SpanExportResult.SUCCESS
    assert sorted(Run.objects.values_list("span_id", "id")) == stored and len(stored) == 5
    sender.shutdown()


def test_an_exporter_without_a_valid_token_stores_nothing(live_server, postgres):
    sender = exporter(live_server, "fs_not_a_token")
    assert sender.export(otel.research_trace()) == SpanExportResult.FAILURE
    assert not Run.objects.exists()
    sender.shutdown()


def test_concurrent_exports_of_the_same_spans_store_each_once(live_server, postgres):
    _, secret = ApiToken.issue("otel-agent")
    spans = otel.research_trace()
    senders = [exporter(live_server, secret) for _ in range(4)]
    with ThreadPoolExecutor(len(senders)) as pool:
        results = list(pool.map(lambda sender: sender.export(spans), senders))
    assert results == [SpanExportResult.SUCCESS] * len(senders)
    assert Run.objects.count() == 5
    for sender in senders:
        sender.shutdown()
