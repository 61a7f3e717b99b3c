"""The real OpenTelemetry SDK and its real OTLP/HTTP exporter (http/protobuf, gzip) send an
instrumented agent's spans to a live server, which stores them as runs with the right failure
types; spans exported one batch each make the same runs; the exporter's retry of the same export
stores nothing twice; without a token it is refused; a failure's parts sent at once to two server
processes still make one run. The whole path: SDK → exporter → HTTP → Django → PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from opentelemetry.trace import Status, StatusCode

from orchestrator.models import ApiToken, Run, TraceSpan
from tests.api import otel
from tests.api.helpers import web_env
from tests.services import start_web

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]


def exporter(live_server, secret: str) -> OTLPSpanExporter:
    return exporter_to(live_server.url, secret)


def exporter_to(url: str, secret: str) -> OTLPSpanExporter:
    return OTLPSpanExporter(
        endpoint=f"{url}/api/v1/otlp/v1/traces",
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

    assert outcomes() == ONE_BATCH_OUTCOMES
    tool = Run.objects.get(source="web_search")
    assert (tool.status_code, tool.retry_after, tool.agent) == (429, 7.0, otel.AGENT)
    assert len({run.trace_id for run in Run.objects.all()}) == 1


ONE_BATCH_OUTCOMES = {
    "invoke_agent researcher": ("succeeded", None),
    "execute_tool web_search": ("failed", "rate_limited"),
    "chat openai": ("failed", "timeout"),
    "query internal_db query internal_db": ("failed", "transient"),
    "execute_tool news_api": ("succeeded", None),
}


def test_a_batch_processor_exporting_every_span_apart_makes_the_runs_of_one_export(
    live_server, postgres
):
    # One span a batch: the tool call's failed HTTP span leaves in the export before the tool
    # span's, the failed step long before its agent's.
    _, secret = ApiToken.issue("otel-agent")
    processor = BatchSpanProcessor(exporter(live_server, secret), max_export_batch_size=1)
    provider = otel.tracer_provider(processor)
    otel.run_agent(provider)
    assert provider.force_flush(20_000)
    provider.shutdown()

    assert outcomes() == ONE_BATCH_OUTCOMES
    tool = Run.objects.get(source="web_search")
    assert (tool.status_code, tool.retry_after, tool.retryable) == (429, 7.0, True)
    assert not TraceSpan.objects.filter(run_id__isnull=True).exists()  # none left waiting


def test_a_child_flushed_before_its_parent_ends_joins_its_parents_run(live_server, postgres):
    _, secret = ApiToken.issue("otel-agent")
    provider = otel.tracer_provider(BatchSpanProcessor(exporter(live_server, secret)))
    tracer = provider.get_tracer("research-agent")
    with tracer.start_as_current_span("execute_tool web_search", attributes=otel.TOOL) as tool:
        with tracer.start_as_current_span("GET", attributes=otel.HTTP_429) as http:
            http.set_status(Status(StatusCode.ERROR))
        assert provider.force_flush(20_000)  # the HTTP span is exported; its parent runs on
        assert not Run.objects.exists()
        tool.record_exception(RuntimeError("the search tool gave up"))
        tool.set_status(Status(StatusCode.ERROR))
    assert provider.force_flush(20_000)
    provider.shutdown()

    run = Run.objects.get()
    assert (run.source, run.failure_type, run.retry_after) == ("web_search", "rate_limited", 7.0)


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


@pytest.fixture
def two_servers(postgres, tmp_path) -> Iterator[list[str]]:
    started = [
        start_web(web_env(tmp_path / name), tmp_path / f"{name}.log", WEB_CONCURRENCY="1")
        for name in ("a", "b")
    ]
    try:
        yield [url for _, url in started]
    finally:
        for server, _ in started:
            server.stop()


def test_a_child_and_its_parent_sent_at_once_to_two_processes_make_one_run(two_servers):
    _, secret = ApiToken.issue("otel-agent")
    traces = [otel.research_trace() for _ in range(12)]
    start = threading.Barrier(2)

    def send(url: str, name: str) -> list[SpanExportResult]:
        sender = exporter_to(url, secret)
        results = []
        for trace in traces:
            start.wait(10)  # a child and its parent leave together, to two processes
            results.append(sender.export([otel.named(trace, name)]))
        sender.shutdown()
        return results

    with ThreadPoolExecutor(2) as pool:
        sent = pool.map(send, two_servers, ["GET", "execute_tool web_search"])
        assert [r for results in sent for r in results] == [SpanExportResult.SUCCESS] * 24

    runs = list(Run.objects.values_list("trace_id", "failure_type", "retry_after"))
    assert sorted(runs) == sorted((otel.ids(t[0])[0], "rate_limited", 7.0) for t in traces)
    assert not TraceSpan.objects.filter(run_id__isnull=True).exists()
