"""Secrets in any shape through every way in, read back from every surface: gitleaks' own
examples and the layered shapes (tests/classifier/shapes_corpus.py) are sent by REST (single,
batch, PATCH), OTLP, the MCP tools' backend, an escalation's reason, a resolution's note and the
Python client, in text and in the fields that name a run (source, topic, capability, exception
type, provider code, model, idempotency key); then the API (run, list, exports), the pages (run,
runs list, search, review queue and item, failure groups, costs), the admin (run, review item and
audit entry lists and forms), /metrics, every database row of the orchestrator's tables and the
log are read, and none holds a secret, while 50 look-alikes come back exactly as sent."""

from __future__ import annotations

import html
import json
import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from unittest.mock import patch

import pytest
import re2
from django.apps import apps
from django.utils import timezone
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from classifier.scrub import FILTERED
from insights import groups
from insights.models import FailureGroup
from insights.stats import refresh_rollups
from orchestrator import scrubbing
from orchestrator.client import AgentClient
from orchestrator.coordination.actions import do_resolve_review
from orchestrator.mcp.services import Caller, InProcess
from orchestrator.models import ReviewItem, Run
from orchestrator.vocabulary import Channel
from tests.api import otel
from tests.api.helpers import post_json
from tests.classifier import shapes_corpus as corpus

pytestmark = pytest.mark.django_db

FORMS: list[tuple[str, str]] = [(e["text"], e["secret"]) for e in corpus.GITLEAKS] + [
    (text, secret) for _, text, secret in corpus.LAYERED
]
SECRETS = sorted({secret for _, secret in FORMS})
PER_RUN = 40
# Short forms fit the fields that name a run (100 to 300 characters).
SHORT = [text for text, _ in FORMS if len(text) <= 90 and "\n" not in text]


def chunks() -> list[list[str]]:
    texts = [text for text, _ in FORMS]
    return [texts[i : i + PER_RUN] for i in range(0, len(texts), PER_RUN)]


def envelope(i: int, texts: list[str]) -> dict[str, Any]:
    """A failed run carrying `texts` everywhere an agent writes text, its names holding short
    forms, and look-alikes that must come back as sent."""
    short = SHORT[i % len(SHORT)]
    return {
        "status": "error",
        "failure_type": "auth_failure",
        "agent": "crm-agent",
        "source": f"https://bot:{SHORT[(i + 1) % len(SHORT)][:20]}@api.example.com/s?api_key={i}x",
        "topic": short,
        "capability": SHORT[(i + 2) % len(SHORT)],
        "exception_type": SHORT[(i + 3) % len(SHORT)],
        "provider_code": SHORT[(i + 4) % len(SHORT)],
        "usage": {"model": f"gpt-4o {SHORT[(i + 5) % len(SHORT)]}", "input_tokens": 10},
        "attempted": {f"arg{n}": text for n, text in enumerate(texts[0::3])},
        "alternatives": texts[1::3],
        "detail": "\n".join(texts[2::3]),
        "partial_results": [{"id": value} for value in corpus.LOOKALIKES],
    }


def variants(secret: str) -> set[str]:
    """A secret as each surface could write it: raw, HTML-escaped, JSON-escaped, CSV-quoted."""
    return {
        secret,
        html.escape(secret),
        html.escape(secret, quote=False),
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
        secret.replace('"', '""'),
    }


SECRET_VARIANTS = {form: secret for secret in SECRETS for form in variants(secret)}
# One RE2 scan of each text for every form of every secret (linear in the text).
FINDER = re2.compile("|".join(re2.escape(form) for form in sorted(SECRET_VARIANTS, key=len)[::-1]))


class Seen:
    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []

    def add(self, where: str, content: str | bytes) -> str:
        text = content.decode("utf-8", "replace") if isinstance(content, bytes) else content
        self.texts.append((where, text))
        return text

    def get(self, client: Any, where: str, **headers: Any) -> str:
        response = client.get(where, **headers)
        assert response.status_code == 200, (where, response.status_code)
        content = b"".join(response.streaming_content) if response.streaming else response.content
        return self.add(where, content)

    def leaks(self) -> list[tuple[str, str]]:
        found = []
        for where, text in self.texts:
            for candidate in (text, html.unescape(text)):
                found += [
                    (where, SECRET_VARIANTS[m.group(0)][:40]) for m in FINDER.finditer(candidate)
                ]
        return found


# The ways in. Each sends every form and returns the ids of the runs it made.


def by_batch(client, auth_headers, **_: Any) -> list[int]:
    runs = [envelope(i, texts) | {"idempotency_key": f"b-{i}"} for i, texts in enumerate(chunks())]
    runs[0]["idempotency_key"] = "key-" + FORMS[-10][0][:60]  # a key holding a secret form
    response = post_json(client, "/runs/batch", {"runs": runs}, **auth_headers)
    assert response.status_code == 200, response.content
    assert {r["status"] for r in response.json()["results"]} == {"created"}, response.content
    return [r["id"] for r in response.json()["results"]]


def by_single(client, auth_headers, **_: Any) -> list[int]:
    ids = []
    for i, texts in enumerate(chunks()):
        key = {"HTTP_IDEMPOTENCY_KEY": f"single-{i}-{SHORT[i][:40]}"}
        response = post_json(client, "/runs", envelope(i, texts), **auth_headers, **key)
        assert response.status_code == 201, response.content
        ids.append(response.json()["id"])
    return ids


def by_patch(client, auth_headers, **_: Any) -> list[int]:
    ids = []
    for i, texts in enumerate(chunks()):
        start = {"status": "running", "agent": "crm-agent", "source": "crm_api"}
        start["attempted"] = {"query": texts[0]}
        started = post_json(client, "/runs", start, **auth_headers).json()
        finish = {k: v for k, v in envelope(i, texts).items() if k not in ("agent", "source")}
        finish = {k: v for k, v in finish.items() if k not in ("topic", "capability")}
        response = client.patch(
            f"/api/v1/runs/{started['id']}",
            data=json.dumps(finish),
            content_type="application/json",
            **auth_headers,
        )
        assert response.status_code == 200, response.content
        ids.append(started["id"])
    return ids


def by_otlp(client, auth_headers, **_: Any) -> list[int]:
    memory = InMemorySpanExporter()
    provider = otel.tracer_provider(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("crm-agent")
    for i, texts in enumerate(chunks()):
        tool = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": f"crm_api_{i}",
            "gen_ai.tool.call.arguments": json.dumps({"args": texts}),
            "gen_ai.request.model": SHORT[i % len(SHORT)],
            "url.full": f"https://crm.example/search?token={i}-{SHORT[i][:30]}",
            "error.type": SHORT[(i + 1) % len(SHORT)],
        }
        with tracer.start_as_current_span(f"execute_tool crm_api_{i}", attributes=tool) as span:
            span.add_event("exception", {"exception.message": "\n".join(texts)})
            span.set_status(Status(StatusCode.ERROR, texts[-1][:500]))
    provider.shutdown()
    body = otel.protobuf_body(list(memory.get_finished_spans()))
    response = client.post(
        "/api/v1/otlp/v1/traces", data=body, content_type="application/x-protobuf", **auth_headers
    )
    assert response.status_code == 200, response.content
    return list(Run.objects.values_list("pk", flat=True))


def by_mcp(client, auth_headers, api_token, **_: Any) -> list[int]:
    """The MCP tools' backend in this process (the tool `report_run`), as the endpoint calls it
    for the token it admitted, but keeping the connection (the backend gives it back after each
    call, as after a request; the test's transaction holds it)."""
    tools = InProcess(Caller(api_token[0], lambda path: f"http://127.0.0.1{path}", {}))
    ids = []
    with patch("orchestrator.mcp.services.close_old_connections", lambda: None):
        for i, texts in enumerate(chunks()):
            outcome = envelope(i, texts)
            agent, source = outcome.pop("agent"), outcome.pop("source")
            fields = {k: outcome.pop(k) for k in ("topic", "capability")}
            answer = tools.report(outcome, agent, source, fields, f"mcp-{i}")
            ids.append(answer["id"])
    return ids


def reasons() -> list[str]:
    """Every form in reasons of up to 2,000 characters (the API's limit)."""
    packed, current = [], ""
    for text, _ in FORMS:
        if current and len(current) + len(text) + 1 > 1990:
            packed.append(current)
            current = ""
        current = f"{current}\n{text}" if current else text[:1990]
    return [*packed, current]


def by_escalation(client, auth_headers, **_: Any) -> list[int]:
    ids = []
    for reason in reasons():
        run = post_json(
            client, "/runs", {"status": "error", "failure_type": "timeout"}, **auth_headers
        )
        body = {"run": run.json()["id"], "reason": reason}
        response = post_json(client, "/reviews", body, **auth_headers)
        assert response.status_code in (200, 201), response.content
        ids.append(run.json()["id"])
    return ids


def by_review_note(client, auth_headers, operator, **_: Any) -> list[int]:
    ids = []
    for texts in chunks():
        run = post_json(
            client, "/runs", {"status": "error", "failure_type": "timeout"}, **auth_headers
        )
        post_json(client, "/reviews", {"run": run.json()["id"], "reason": "stuck"}, **auth_headers)
        item = ReviewItem.objects.get(run_id=run.json()["id"])
        edited = {f"arg{n}": text for n, text in enumerate(texts)}
        do_resolve_review(
            item,
            operator,
            "retry_edited",
            channel=Channel.DASHBOARD,
            note="\n".join(texts)[:4000],
            edited_input=edited,
        )
        ids.append(run.json()["id"])
    return ids


def by_client(client, auth_headers, **_: Any) -> list[int]:
    agent = AgentClient("http://127.0.0.1:1", "fs_token", strict=True, sync_policies=False)
    ids = []
    try:
        for i, texts in enumerate(chunks()):
            sent = agent.scrubbed(envelope(i, texts))
            assert agent._idempotency(SHORT[i])["Idempotency-Key"] != SHORT[i]
            Seen().add("client", json.dumps(sent))
            assert [s for s in SECRETS if s in json.dumps(sent, ensure_ascii=False)] == []
            response = post_json(client, "/runs", sent, **auth_headers)
            assert response.status_code == 201, response.content
            ids.append(response.json()["id"])
    finally:
        agent.close()
    return ids


WAYS = {
    "REST batch": by_batch,
    "REST single": by_single,
    "PATCH": by_patch,
    "OTLP": by_otlp,
    "MCP": by_mcp,
    "escalation reason": by_escalation,
    "review note": by_review_note,
    "client": by_client,
}


@pytest.fixture(autouse=True)
def _fresh_scrubber() -> Iterator[None]:
    yield
    scrubbing.forget()


def read_everything(client, admin_client, auth_headers, operator, run_ids: list[int]) -> Seen:
    seen = Seen()
    refresh_rollups(timezone.now() - timedelta(hours=2))
    groups.fold(timezone.now() - timedelta(hours=2))
    client.force_login(operator)
    for pk in run_ids:
        seen.get(client, f"/api/v1/runs/{pk}", **auth_headers)
        seen.get(client, f"/runs/{pk}/")
    # The admin's form of the first way's runs: each way's runs hold every form, in one table.
    for pk in run_ids[: len(chunks())]:
        seen.get(admin_client, f"/admin/orchestrator/run/{pk}/change/")
    for path in (
        "/api/v1/runs?limit=500",
        "/api/v1/runs/export?format=csv",
        "/api/v1/runs/export?format=jsonl",
        "/api/v1/reviews",
    ):
        seen.get(client, path, **auth_headers)
    for path in (
        "/runs/",
        "/runs/?q=crm",
        "/search/?q=crm",
        "/review/",
        "/groups/",
        "/costs/",
        "/runs/export/?format=jsonl",
    ):
        seen.get(client, path)
    for item in ReviewItem.objects.all():
        seen.get(client, f"/review/{item.pk}/")
        seen.get(admin_client, f"/admin/orchestrator/reviewitem/{item.pk}/change/")
    for group in FailureGroup.objects.all():
        seen.get(client, f"/groups/{group.pk}/")
    for path in (
        "/admin/orchestrator/run/",
        "/admin/orchestrator/reviewitem/",
        "/admin/orchestrator/auditentry/",
    ):
        seen.get(admin_client, path)
    seen.get(client, "/metrics")
    models = [*apps.get_app_config("orchestrator").get_models()]
    for model in [*models, *apps.get_app_config("insights").get_models()]:
        rows = list(model.objects.values())
        seen.add(f"table {model._meta.db_table}", json.dumps(rows, default=str, ensure_ascii=False))
        seen.add(f"table {model._meta.db_table} raw", repr(rows))
    return seen


GROUPS = {
    "REST": ("REST batch", "REST single", "PATCH"),
    "OTLP, MCP and the client": ("OTLP", "MCP", "client"),
    "reviews": ("escalation reason", "review note"),
}


@pytest.mark.parametrize("group", list(GROUPS))
def test_no_secret_form_sent_by_any_way_in_is_found_on_any_surface(
    group, client, admin_client, auth_headers, api_token, operator, settings, caplog
):
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1"]
    caplog.set_level(logging.DEBUG)
    run_ids: list[int] = []
    for way in GROUPS[group]:
        sent = WAYS[way](
            client=client, auth_headers=auth_headers, api_token=api_token, operator=operator
        )
        assert sent, way
        run_ids += sent
    seen = read_everything(client, admin_client, auth_headers, operator, sorted(set(run_ids)))
    seen.add("log", caplog.text)
    assert seen.leaks() == []
    assert FILTERED in " ".join(text for _, text in seen.texts)


def test_look_alikes_come_back_exactly_as_sent_from_the_api_and_the_database(client, auth_headers):
    runs = [envelope(i, texts) for i, texts in enumerate(chunks()[:2])]  # beside secrets
    response = post_json(client, "/runs/batch", {"runs": runs}, **auth_headers)
    ids = [r["id"] for r in response.json()["results"]]
    for pk in ids:
        answer = client.get(f"/api/v1/runs/{pk}", **auth_headers).json()
        assert answer["partial_results"] == [{"id": value} for value in corpus.LOOKALIKES]
    assert {json.dumps(r) for r in Run.objects.values_list("partial_results", flat=True)} == {
        json.dumps([{"id": value} for value in corpus.LOOKALIKES])
    }
    looks = {"status": "ok", "agent": "a", "source": "news_api", "topic": corpus.LOOKALIKES[0]}
    looks |= {"detail": "\n".join(corpus.LOOKALIKES), "alternatives": corpus.LOOKALIKES}
    answer = post_json(client, "/runs", looks, **auth_headers).json()
    assert answer["topic"] == corpus.LOOKALIKES[0] and answer["alternatives"] == corpus.LOOKALIKES
    assert answer["scrubbed_fields"] == 0
