"""Secrets filtered at the door, through the test client: a single report, a batch, a finish
(PATCH), an OTLP export with the real SDK's encoder, an escalation's reason and a resolution's
edited input; each run counts what was filtered; an operator's scrub rule applies to the next
report. (Over HTTP into the server as shipped, with every page and export read back:
test_scrub_live.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.forms.models import model_to_dict
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from classifier.scrub import FILTERED
from orchestrator import scrubbing
from orchestrator.coordination.actions import do_resolve_review
from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import AuditEntry, ReviewItem, Run, ScrubRule, TraceSpan
from orchestrator.vocabulary import Channel
from tests.api import otel
from tests.api.helpers import post_json
from tests.classifier import secrets_corpus as corpus

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _rules_of_this_test_only():
    yield
    scrubbing.forget()  # the rules compiled here are rolled back with the test


def leaks(*values: Any) -> list[str]:
    found = json.dumps(values, default=str)
    return [secret for secret in corpus.secrets() if secret in found]


@pytest.fixture
def operator_rules(db) -> None:
    for row in corpus.OPERATOR_RULES:
        save_policy_change(ScrubRule(kind=row["kind"], value=row["value"]), actor=None)


def report(client, auth_headers, body: dict[str, Any]) -> dict[str, Any]:
    named = body | {"agent": "crm-agent", "source": "crm_api"}
    response = post_json(client, "/runs", named, **auth_headers)
    assert response.status_code == 201, response.content
    return response.json()


def test_a_single_report_is_stored_and_answered_without_its_secrets(
    client, auth_headers, operator_rules
):
    answer = report(client, auth_headers, corpus.envelope(depth=30))
    run = Run.objects.get(pk=answer["id"])
    assert leaks(answer, model_to_dict(run)) == []
    assert run.scrubbed_fields == answer["scrubbed_fields"] > 20
    assert run.attempted["api_key"] == FILTERED and run.attempted["query"] == "ACME accounts"
    assert corpus.NOT_A_CARD in run.detail and "page=2" in run.detail


def test_a_batch_is_stored_without_its_secrets_and_each_run_counts_its_own(
    client, auth_headers, operator_rules
):
    items = [
        corpus.envelope(depth=28) | {"idempotency_key": "b-1"},
        corpus.success(depth=28) | {"idempotency_key": "b-2"},
        {"status": "ok", "results": [{"title": "nothing secret"}], "idempotency_key": "b-3"},
    ]
    response = post_json(client, "/runs/batch", {"runs": items}, **auth_headers)
    assert [r["status"] for r in response.json()["results"]] == ["created"] * 3
    runs = list(Run.objects.order_by("idempotency_key"))
    assert leaks([model_to_dict(run) for run in runs], response.json()) == []
    assert [run.scrubbed_fields > 0 for run in runs] == [True, True, False]
    assert scrubbing.scrubbed_fields_total() == sum(run.scrubbed_fields for run in runs)


def finish(client, auth_headers, run_id: int, body: dict[str, Any]) -> Any:
    return client.patch(
        f"/api/v1/runs/{run_id}",
        data=json.dumps(body),
        content_type="application/json",
        **auth_headers,
    )


def test_a_finish_is_stored_without_its_secrets_and_counts_what_the_run_holds(
    client, auth_headers, operator_rules
):
    start = {"status": "running", "attempted": {"api_key": corpus.API_KEY}}
    started = report(client, auth_headers, start)
    assert started["scrubbed_fields"] == 1
    response = finish(client, auth_headers, started["id"], corpus.envelope(depth=30))
    assert response.status_code == 200, response.content
    run = Run.objects.get(pk=started["id"])
    assert leaks(response.json(), model_to_dict(run)) == []
    assert run.scrubbed_fields == response.json()["scrubbed_fields"] > 20
    again = finish(client, auth_headers, started["id"], corpus.envelope(depth=30))
    assert again.status_code == 200  # the same finish, filtered the same way, is a replay

    other = report(client, auth_headers, start)
    failed = {"status": "error", "failure_type": "timeout", "detail": f"token={corpus.URL_TOKEN}"}
    answer = finish(client, auth_headers, other["id"], failed).json()
    assert answer["attempted"] == {"api_key": FILTERED} and answer["scrubbed_fields"] == 2


def hostile_spans(provider: Any) -> None:
    """An agent whose tool call fails with the corpus in its attributes, its exception (message
    and stack trace), its status and the name of a failed HTTP span under it."""
    tracer = provider.get_tracer("crm-agent")
    invoke = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "crm-agent"}
    tool = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "crm_api",
        "gen_ai.tool.call.arguments": json.dumps(corpus.attempted(depth=6)),
        "http.request.header.authorization": (f"Bearer {corpus.JWT}",),
        "url.full": f"https://crm.example/search?token={corpus.URL_TOKEN}&page=2",
        "customer.card": corpus.CARD_NUMBER,
    }
    with tracer.start_as_current_span("invoke_agent crm-agent", attributes=invoke):
        try:
            with tracer.start_as_current_span("execute_tool crm_api", attributes=tool) as span:
                http = {"http.request.method": "GET", "http.response.status_code": 401}
                name = f"GET /accounts?api_key={corpus.API_KEY}"
                with tracer.start_as_current_span(name, kind=SpanKind.CLIENT, attributes=http) as s:
                    s.set_status(Status(StatusCode.ERROR, f"401 with password={corpus.PASSWORD}"))
                span.set_status(Status(StatusCode.ERROR, f"denied: token={corpus.URL_TOKEN}"))
                raise PermissionError(corpus.exception_text())
        except PermissionError:
            pass


def hostile_trace() -> list:
    memory = InMemorySpanExporter()
    provider = otel.tracer_provider(SimpleSpanProcessor(memory))
    hostile_spans(provider)
    provider.shutdown()
    return list(memory.get_finished_spans())


def test_an_otlp_export_is_stored_without_the_secrets_of_its_attributes_and_events(
    client, auth_headers, operator_rules
):
    body = otel.protobuf_body(hostile_trace())
    assert corpus.API_KEY.encode() in body and corpus.JWT.encode() in body
    response = client.post(
        "/api/v1/otlp/v1/traces", data=body, content_type="application/x-protobuf", **auth_headers
    )
    assert response.status_code == 200, response.content
    runs = list(Run.objects.all())
    assert {run.source for run in runs} >= {"crm_api"}
    kept = b"".join(bytes(row.span) + bytes(row.resource) for row in TraceSpan.objects.all())
    assert leaks([model_to_dict(run) for run in runs]) == []
    assert [s for s in corpus.secrets() if s.encode() in kept + response.content] == []
    tool = Run.objects.get(source="crm_api")
    assert tool.scrubbed_fields > 10 and "page=2" in json.dumps(tool.attempted)


def test_an_escalation_s_reason_and_a_resolution_s_input_and_note_lose_their_secrets(
    client, auth_headers, operator, operator_rules
):
    run = report(client, auth_headers, corpus.envelope(depth=30))
    reason = f"stuck: {corpus.exception_text()}"
    response = post_json(client, "/reviews", {"run": run["id"], "reason": reason}, **auth_headers)
    assert response.status_code == 201, response.content
    item = ReviewItem.objects.get()
    edited = corpus.attempted(depth=30)
    do_resolve_review(
        item,
        operator,
        "retry_edited",
        channel=Channel.DASHBOARD,
        note=f"new key {corpus.OPENAI_KEY}",
        edited_input=edited,
    )
    item.refresh_from_db()
    answer = client.get(f"/api/v1/reviews/{item.pk}", **auth_headers).json()
    audits = list(AuditEntry.objects.values("before", "after", "note"))
    assert leaks(response.json(), answer, model_to_dict(item), audits) == []
    assert item.edited_input["query"] == "ACME accounts"


def test_an_operator_s_rule_applies_to_the_next_report_and_comes_with_the_policies(
    client, auth_headers
):
    before = report(
        client, auth_headers, {"status": "ok", "attempted": {"iban": "DE89370400440532013000"}}
    )
    assert before["attempted"]["iban"] == "DE89370400440532013000"
    version = save_policy_change(ScrubRule(kind="key", value="iban"), actor=None)
    after = report(
        client, auth_headers, {"status": "ok", "attempted": {"IBAN": "DE89370400440532013000"}}
    )
    assert after["attempted"]["IBAN"] == FILTERED
    policies = client.get("/api/v1/policies", **auth_headers)
    assert policies["X-Policy-Version"] == str(version) == str(policies.json()["version"])
    assert policies.json()["scrub_rules"] == [
        {"kind": "key", "value": "iban", "note": "", "enabled": True}
    ]


def test_the_python_client_spools_a_report_without_its_secrets_while_the_server_is_down(tmp_path):
    from orchestrator.client import AgentClient

    spool = tmp_path / "spool.jsonl"
    down = f"http://127.0.0.1:{otel.refused_port()}"
    client = AgentClient(
        down, "fs_token", spool_path=spool, sync_policies=False, flush_timeout=1, max_attempts=1
    )
    track = client.track("crm-agent", "crm_api", "lookup", attempted=corpus.attempted(30))
    with pytest.raises(PermissionError), track:
        raise PermissionError(corpus.exception_text())
    client.close()
    kept = spool.read_text()
    assert "crm_api" in kept and FILTERED in kept
    # The operators' rules are the server's: this client never fetched them.
    assert [s for s in corpus.secrets() if s in kept] == [corpus.SSN]
