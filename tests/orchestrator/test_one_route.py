"""One routing decision on every path: local recovery, the built-in coordinator, an agent asking
with a failure, with a run it reported one by one or in a batch, and with a run an OTLP export
made. The same provider answer, met in the same source state (budget, breaker, Retry-After
hold), gets the same action everywhere; and what says a retry cannot help is never retried,
locally either."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Status, StatusCode

from classifier.envelope import error_envelope
from orchestrator.coordination import budget, execution, policy, routing, workflow
from orchestrator.coordination.registry import Source
from orchestrator.models import Run, SourceHealth
from tests.api import otel

SOURCE = "props_api"  # registered nowhere: no alternative, no credential refresher, on any path
ATTEMPTED = {"operation": "search", "query": "AI impact on film"}


class Clock:
    """Real time that never sleeps: local recovery's pauses and waits are recorded, not spent."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def answer(status: int, retry_after: int | None, should_retry: str | None) -> httpx.HTTPStatusError:
    """A provider's answer as httpx raises it."""
    headers = {}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    if should_retry is not None:
        headers["x-should-retry"] = should_retry
    request = httpx.Request("GET", "https://props.test/v1?q=film")
    response = httpx.Response(status, headers=headers, json={"error": "x"}, request=request)
    return httpx.HTTPStatusError(f"HTTP {status}", request=request, response=response)


def classified(exc: Exception) -> dict[str, Any]:
    """The envelope an agent's client sends: classified with the server's provider overrides (it
    fetches them), as the built-in coordinator classifies."""
    classifier = policy.current_classifier()
    return error_envelope(exc, attempted=ATTEMPTED, classifier=classifier, provider=SOURCE)


@dataclass(frozen=True)
class State:
    """A source's health as other callers left it, times relative to now."""

    tokens: float = 500
    breaker: str = "closed"
    failures: int = 0
    opened_ago: float | None = None
    held_for: float | None = None

    def apply(self) -> None:
        now = datetime.now(UTC)
        held = None if self.held_for is None else now + timedelta(seconds=self.held_for)
        opened = None if self.opened_ago is None else now - timedelta(seconds=self.opened_ago)
        SourceHealth.objects.update_or_create(
            source=SOURCE,
            defaults=dict(
                budget_tokens=self.tokens,
                breaker_state=self.breaker,
                consecutive_failures=self.failures,
                opened_at=opened,
                not_before=held,
                hold_from=None if held is None else now - timedelta(seconds=1),
            ),
        )


CLEAN = State()
REASONS: dict[str, str] = {}


def local_action(exc: Exception, state: State, attempt: int) -> tuple[str, int]:
    """Local recovery: the state changes while the call is in flight (another caller's answer),
    then the call fails; return the action routing gave it and the calls made."""
    CLEAN.apply()
    calls: list[int] = []

    def call(query: dict[str, Any]) -> list[dict]:
        calls.append(1)
        if len(calls) == 1:
            state.apply()
            raise exc
        return []

    classifier = policy.current_classifier()
    outcome = execution.call_with_recovery(
        Source(SOURCE, call),
        dict(ATTEMPTED),
        classify=lambda e: classifier.classify(e, provider=SOURCE),
        clock=Clock(),
        gate=execution.SourceGate(SOURCE, attempt, routing.Context(source=SOURCE)),
    )
    return outcome.decisions[0].action, outcome.calls


def built_in_action(envelope: dict[str, Any], state: State, attempt: int) -> str:
    """The built-in coordinator: the failed call fed the source, the run recorded, then routed."""
    first = Run.objects.create(agent="a", source=SOURCE, status="failed", failure_type="timeout")
    run = Run.objects.create(
        agent="a",
        source=SOURCE,
        status="running",
        attempt=attempt,
        retry_of=first if attempt > 1 else None,
    )
    state.apply()
    now = datetime.now(UTC)
    failed = budget.Answer(
        SOURCE, False, now, envelope["failure_type"], envelope["retry_after"], attempt > 1
    )
    budget.record([failed], now)
    assert run.record_outcome(envelope, now, calls=1)
    return workflow.decide_for(None, run).action


def reported(envelope: dict[str, Any], attempt: int, first: int | None) -> dict[str, Any]:
    now = datetime.now(UTC)
    body = envelope | {"agent": "scout", "source": SOURCE, "attempt": attempt, "retry_of": first}
    return body | {
        "started_at": (now - timedelta(seconds=1)).isoformat(),
        "finished_at": now.isoformat(),
    }


def post(client, path: str, body: Any, headers: dict[str, str]) -> Any:
    response = client.post(
        f"/api/v1{path}", json.dumps(body), content_type="application/json", **headers
    )
    assert response.status_code in (200, 201), response.content
    return response.json()


def first_attempt(client, headers: dict[str, str], attempt: int) -> int | None:
    if attempt == 1:
        return None
    body = {"status": "error", "failure_type": "timeout", "agent": "scout", "source": SOURCE}
    return post(client, "/runs", body, headers)["id"]


def agent_actions(
    client, headers: dict[str, str], envelope: dict[str, Any], state: State, attempt: int
) -> dict[str, str]:
    """An agent's coordinator: asking with the failure (after reporting it elsewhere, so the source
    met it too), and with the runs it reported alone and in a batch."""
    actions = {}
    state.apply()
    at = datetime.now(UTC)
    answer = budget.Answer(
        SOURCE, False, at, envelope["failure_type"], envelope["retry_after"], attempt > 1
    )
    budget.record([answer], at)
    ask = {"failure": envelope, "attempt": attempt, "source": SOURCE}
    actions["decisions"] = post(client, "/decisions", ask, headers)["action"]

    first = first_attempt(client, headers, attempt)
    state.apply()
    run = post(client, "/runs", reported(envelope, attempt, first), headers)
    decided = post(client, "/decisions", {"run": run["id"]}, headers)
    REASONS["runs"] = decided["reason"]
    actions["runs"] = decided["action"]

    first = first_attempt(client, headers, attempt)
    state.apply()
    batch = post(client, "/runs/batch", {"runs": [reported(envelope, attempt, first)]}, headers)
    run_id = batch["results"][0]["id"]
    actions["batch"] = post(client, "/decisions", {"run": run_id}, headers)["action"]
    return actions


def otlp_action(
    client, headers, status: int, retry_after: int | None, should_retry: str | None, state: State
) -> str:
    """A tool call exported as an OpenTelemetry span with its HTTP answer's attributes."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "props"}), id_generator=FreshIds()
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": SOURCE,
        "http.response.status_code": status,
    }
    if retry_after is not None:
        attrs["http.response.header.retry-after"] = (str(retry_after),)
    if should_retry is not None:
        attrs["http.response.header.x-should-retry"] = (should_retry,)
    with provider.get_tracer("t").start_as_current_span(
        f"execute_tool {SOURCE}", attributes=attrs
    ) as span:
        span.set_status(Status(StatusCode.ERROR, f"HTTP {status}"))
    provider.shutdown()
    spans = list(memory.get_finished_spans())
    state.apply()
    response = client.post(
        "/api/v1/otlp/v1/traces",
        otel.protobuf_body(spans),
        content_type="application/x-protobuf",
        **headers,
    )
    assert response.status_code == 200, response.content
    trace_id, span_id = otel.ids(spans[0])
    run = Run.objects.get(trace_id=trace_id, span_id=span_id)
    decided = post(client, "/decisions", {"run": run.pk}, headers)
    REASONS["otlp"] = decided["reason"]
    return decided["action"]


class FreshIds(IdGenerator):
    """Ids from the system's randomness: hypothesis seeds `random`, which would repeat them (and an
    exporter's repeated span is the stored run, not a new one)."""

    def generate_span_id(self) -> int:
        return secrets.randbits(64) or 1

    def generate_trace_id(self) -> int:
        return secrets.randbits(128) or 1


STATES = st.builds(
    State,
    tokens=st.sampled_from([500.0, 3.0, 0.0]),
    breaker=st.sampled_from(["closed", "open", "half_open"]),
    failures=st.sampled_from([0, 4]),
    opened_ago=st.sampled_from([None, 5.0, 40.0]),
    held_for=st.sampled_from([None, -30.0, 25.0, 90.0, 600.0]),
)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    status=st.sampled_from([408, 429, 500, 501, 502, 503, 504, 529, 400, 401, 404, 422]),
    retry_after=st.sampled_from([None, 1, 3, 30, 200]),
    should_retry=st.sampled_from([None, "false", "true"]),
    state=STATES,
    attempt=st.integers(1, 3),
)
def test_every_path_routes_the_same_answer_in_the_same_state_alike(
    client, auth_headers, status, retry_after, should_retry, state, attempt
):
    exc = answer(status, retry_after, should_retry)
    envelope = classified(exc)
    local, calls = local_action(exc, state, attempt)
    actions = {"local": local, "built_in": built_in_action(envelope, state, attempt)}
    actions |= agent_actions(client, auth_headers, envelope, state, attempt)
    if attempt == 1:  # a span carries no retry_of: an export's runs are first attempts
        actions["otlp"] = otlp_action(
            client, auth_headers, status, retry_after, should_retry, state
        )
    said = f"{status} Retry-After {retry_after} x-should-retry {should_retry}, attempt {attempt}"
    assert len(set(actions.values())) == 1, f"{said}, {state}: {actions} {REASONS}"
    if envelope["retryable"] is False:
        assert local not in ("retry", "wait") and calls == 1


def test_a_408_saying_no_retry_is_called_once_and_not_retried_by_anyone(client, auth_headers):
    exc = answer(408, None, "false")
    envelope = classified(exc)
    assert (envelope["failure_type"], envelope["retryable"]) == ("timeout", False)
    local, calls = local_action(exc, CLEAN, 1)
    assert calls == 1 and local == "accept_partial"
    assert SourceHealth.objects.get(source=SOURCE).budget_tokens == 500  # nothing spent
    assert set(agent_actions(client, auth_headers, envelope, CLEAN, 1).values()) == {local}


def test_a_blip_is_retried_locally_and_paid_for_like_any_retry(db):
    timeout = httpx.ReadTimeout("timed out", request=httpx.Request("GET", "https://props.test"))
    local, calls = local_action(timeout, CLEAN, 1)
    assert (local, calls) == ("retry", 2)
    assert SourceHealth.objects.get(source=SOURCE).budget_tokens == 490  # a timeout's retry
