"""One failure is one run whichever way its spans are split across exports: a tool call's failed
HTTP span and the tool span exported apart (child first, as a BatchSpanProcessor does, or parent
first) make the run one export makes; a child whose parent never comes becomes a run of its own
after OTLP_JOIN_WAIT_SECONDS, which the parent, should it still come, takes over; re-exports add
nothing. (The real exporter over HTTP, batches apart: test_otlp_live.py.)"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from orchestrator.ingest import span_joins
from orchestrator.models import Run, TraceSpan
from tests.api import otel

URL = "/api/v1/otlp/v1/traces"
PROTOBUF = "application/x-protobuf"
TOOL = "execute_tool web_search"
HTTP = "GET"


@pytest.fixture(scope="module")
def trace() -> list:
    return otel.research_trace()


@pytest.fixture
def post(client, auth_headers):
    def post(request: ExportTraceServiceRequest) -> ExportTraceServiceResponse:
        body = request.SerializeToString()
        response = client.post(URL, data=body, content_type=PROTOBUF, **auth_headers)
        assert response.status_code == 200, response.content
        return ExportTraceServiceResponse.FromString(response.content)

    return post


@pytest.fixture
def send(post):
    return lambda *spans: post(request_of(*spans))


def request_of(*spans) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(otel.protobuf_body(spans))


def span_ids(spans) -> dict[str, str]:
    return {span.name: otel.ids(span)[1] for span in spans}


def tool_run(trace) -> Run:
    return Run.objects.get(span_id=span_ids(trace)[TOOL])


def assert_rate_limited_tool(run: Run) -> None:
    assert (run.status, run.failure_type) == ("failed", "rate_limited")
    assert (run.status_code, run.retry_after, run.retryable) == (429, 7.0, True)
    assert (run.source, run.operation) == ("web_search", "execute_tool")


def later(seconds: float) -> timezone.datetime:
    return timezone.now() + timedelta(seconds=seconds)


def test_the_http_child_exported_first_waits_and_joins_its_tool_span(send, trace):
    child, tool = otel.named(trace, HTTP), otel.named(trace, TOOL)
    assert not send(child).HasField("partial_success")
    assert not Run.objects.exists()  # held for its parent, not a run of its own
    assert TraceSpan.objects.get().awaits == span_ids(trace)[TOOL]

    send(tool)
    assert_rate_limited_tool(Run.objects.get())
    assert not TraceSpan.objects.filter(run_id__isnull=True).exists()  # nothing left waiting
    assert span_joins.release_due(later(300)) == 0
    assert Run.objects.count() == 1


def test_the_tool_span_exported_first_is_updated_by_its_late_child(send, trace, settings):
    send(otel.named(trace, TOOL))
    alone = Run.objects.get()
    # Without its HTTP span the tool's failure has no status code and no Retry-After.
    assert alone.retry_after is None and alone.status_code is None

    send(otel.named(trace, HTTP))
    run = Run.objects.get()
    assert run.pk == alone.pk
    assert_rate_limited_tool(run)


def test_re_exports_of_either_part_add_nothing(send, trace):
    child, tool = otel.named(trace, HTTP), otel.named(trace, TOOL)
    send(child)
    send(tool)
    run = Run.objects.values().get()
    for spans in ([child], [tool], [child, tool], [tool, child]):
        assert not send(*spans).HasField("partial_success")
        assert list(Run.objects.values()) == [run]
    assert TraceSpan.objects.count() == 2


def test_the_whole_trace_span_by_span_gives_the_runs_of_one_export(send, client, trace):
    for span in trace:  # in the order they ended, one export each
        send(span)
    by_span = {
        run.span_id: (run.status, run.failure_type, run.source, run.retry_after)
        for run in Run.objects.all()
    }
    Run.objects.all().delete()
    TraceSpan.objects.all().delete()
    send(*trace)
    assert by_span == {
        run.span_id: (run.status, run.failure_type, run.source, run.retry_after)
        for run in Run.objects.all()
    }
    assert len(by_span) == 5


def test_a_child_whose_parent_never_comes_is_a_run_after_the_wait(send, trace, settings):
    settings.OTLP_JOIN_WAIT_SECONDS = 30
    send(otel.named(trace, HTTP))
    assert span_joins.release_due(later(20)) == 0 and not Run.objects.exists()
    assert span_joins.release_due(later(31)) == 1
    run = Run.objects.get()
    assert (run.failure_type, run.retry_after, run.source) == (
        "rate_limited",
        7.0,
        "search.example",
    )
    assert span_joins.release_due(later(62)) == 0
    assert Run.objects.count() == 1


def test_a_parent_arriving_after_the_wait_takes_its_childs_run_over(send, trace):
    send(otel.named(trace, HTTP))
    span_joins.release_due(later(300))
    released = Run.objects.get()

    assert not send(otel.named(trace, TOOL)).HasField("partial_success")
    run = Run.objects.get()
    assert run.pk == released.pk
    assert_rate_limited_tool(run)
    assert run.span_id == span_ids(trace)[TOOL]
    # The tool span again, or the child: still that one run.
    send(otel.named(trace, TOOL))
    send(otel.named(trace, HTTP))
    assert list(Run.objects.values_list("pk", "span_id")) == [(run.pk, run.span_id)]


def test_a_failed_step_of_an_agent_that_went_on_is_its_own_run_once_the_agent_arrives(send, trace):
    step = otel.named(trace, "query internal_db")
    send(step)
    assert not Run.objects.exists()
    send(otel.named(trace, f"invoke_agent {otel.AGENT}"))
    run = Run.objects.get(span_id=span_ids(trace)["query internal_db"])
    assert (run.failure_type, run.agent) == ("transient", otel.AGENT)
    assert span_joins.release_due(later(300)) == 0
    assert Run.objects.count() == 2  # the agent's run and the step's


def test_a_child_of_a_call_stored_without_it_explains_that_call_at_the_wait(send, post, trace):
    # A tool call that went on: its failed HTTP span was recovered from. Sent first, it is a
    # success of its own; the child then waits, and at the wait's end explains it.
    send(otel.named(trace, "execute_tool news_api"))
    request = request_of(otel.named(trace, HTTP))
    parent = bytes.fromhex(span_ids(trace)["execute_tool news_api"])
    request.resource_spans[0].scope_spans[0].spans[0].parent_span_id = parent
    post(request)
    assert span_joins.release_due(later(300)) == 0
    assert list(Run.objects.values_list("status", flat=True)) == ["succeeded"]
    http = TraceSpan.objects.get(span_id=span_ids(trace)[HTTP])
    assert http.run_id == Run.objects.get().pk


def test_a_kept_span_sent_with_other_content_is_refused(send, post, trace):
    send(otel.named(trace, HTTP))
    request = request_of(otel.named(trace, HTTP))
    request.resource_spans[0].scope_spans[0].spans[0].name = "GET renamed"
    answer = post(request)
    assert answer.partial_success.rejected_spans == 1
    assert "already used for a different span" in answer.partial_success.error_message
    assert TraceSpan.objects.get().digest  # the first one stands


def test_an_agent_invocation_exported_after_its_calls_names_their_agent(send, trace):
    # A BatchSpanProcessor exports the calls as they end, the agent invocation (ending last)
    # in a later export: its calls' runs first carry the service's name, then the agent's.
    calls = [span for span in trace if not span.name.startswith("invoke_agent")]
    send(*calls)
    assert set(Run.objects.values_list("agent", flat=True)) == {otel.SERVICE}
    send(otel.named(trace, f"invoke_agent {otel.AGENT}"))
    assert set(Run.objects.values_list("agent", flat=True)) == {otel.AGENT}
    assert Run.objects.count() == 5
    send(*calls)  # a re-export changes nothing
    assert set(Run.objects.values_list("agent", flat=True)) == {otel.AGENT}
    assert Run.objects.count() == 5
