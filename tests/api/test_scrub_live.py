"""The hostile-secret corpus through every way in, black box: the web server as shipped takes a
single report, a batch, a finish (PATCH), an OTLP export from the real SDK's exporter, the Python
client's reports (in the background and strict), an MCP report, an escalation's reason and an
operator's resolution with an edited input; then every page that shows them (run, review item,
review queue, runs list, search), the exports (CSV, JSON Lines, from the dashboard and the API),
the API's answers, the resolution's webhook as its receiver got it, the server's log and what the
client put on the wire are read back, and none holds any of the secrets."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from django.conf import settings
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import Group, User
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from orchestrator.client import AgentClient
from orchestrator.coordination import webhooks
from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import ApiToken, ReviewItem, Run, ScrubRule, WebhookDelivery
from tests.api.helpers import web_env
from tests.api.test_mcp_live import answer, over_http
from tests.api.test_scrub import hostile_spans
from tests.classifier import secrets_corpus as corpus
from tests.orchestrator.test_webhooks import Receiver
from tests.services import start_web

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

OPERATOR = ("olga", "operator-pass-123")


@pytest.fixture
def web(postgres, tmp_path) -> Iterator[tuple[str, Path]]:
    log = tmp_path / "web.log"
    process, url = start_web(
        web_env(tmp_path, SECURE_COOKIES="0"), log, WEB_CONCURRENCY="2", LOG_LEVEL="INFO"
    )
    try:
        yield url, log
    finally:
        process.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver([])
    yield r
    r.close()


def operator_session(url: str) -> httpx.Client:
    """An operator signed in to the dashboard (the server's own password hasher)."""
    hasher = PBKDF2PasswordHasher()
    user = User.objects.create(username=OPERATOR[0], password=hasher.encode(OPERATOR[1], "salt0"))
    user.groups.add(Group.objects.get(name="operators"))
    browser = httpx.Client(base_url=url, timeout=30, follow_redirects=True)
    form = browser.get("/accounts/login/").text
    data = {"username": OPERATOR[0], "password": OPERATOR[1], "csrfmiddlewaretoken": csrf(form)}
    landed = browser.post("/accounts/login/", data=data, headers={"Referer": f"{url}/"})
    assert "/accounts/login/" not in str(landed.url), landed.text
    return browser


def csrf(page: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)


class Seen:
    """Everything read back: each text with where it came from."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []

    def add(self, where: str, text: str | bytes) -> str:
        text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        self.texts.append((where, text))
        return text

    def answer(self, where: str, response: httpx.Response) -> Any:
        assert response.status_code < 300, (where, response.status_code, response.text)
        self.add(where, response.content)
        return (
            response.json()
            if response.headers.get("content-type", "").startswith("application/json")
            else None
        )

    def leaks(self) -> list[tuple[str, str]]:
        return [
            (where, secret)
            for where, text in self.texts
            for secret in corpus.secrets()
            if secret in text
        ]


def test_no_secret_sent_through_any_way_in_is_found_on_any_page_export_answer_or_log(
    web, receiver, tmp_path
):
    url, log = web
    for row in corpus.OPERATOR_RULES:
        save_policy_change(ScrubRule(kind=row["kind"], value=row["value"]), actor=None)
    time.sleep(settings.POLICY_VERSION_CACHE_SECONDS + 0.2)  # until every process announces it
    token, secret = ApiToken.issue("crm-agent")
    signing = token.set_callback(receiver.url)
    seen = Seen()
    api = httpx.Client(
        base_url=f"{url}/api/v1", headers={"Authorization": f"Bearer {secret}"}, timeout=30
    )
    named = {"agent": "crm-agent", "source": "crm_api"}

    # REST: one report, a batch, a start and its finish
    single = seen.answer("POST /runs", api.post("/runs", json=corpus.envelope(30) | named))
    items = [corpus.envelope(28) | named, corpus.success(28) | named]
    items = [item | {"idempotency_key": f"batch-{i}"} for i, item in enumerate(items)]
    seen.answer("POST /runs/batch", api.post("/runs/batch", json={"runs": items}))
    start = {"status": "running", "attempted": corpus.attempted(30)} | named
    started = seen.answer("POST /runs running", api.post("/runs", json=start))
    seen.answer("PATCH", api.patch(f"/runs/{started['id']}", json=corpus.envelope(30)))

    # OTLP: the real SDK's exporter, its resource holding a key too
    resource = Resource.create({"service.name": "crm-service", "deploy.api_key": corpus.API_KEY})
    exporter = OTLPSpanExporter(
        endpoint=f"{url}/api/v1/otlp/v1/traces",
        headers={"Authorization": f"Bearer {secret}"},
        compression=Compression.Gzip,
        timeout=10,
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    hostile_spans(provider)
    assert provider.force_flush(20_000)
    provider.shutdown()

    # The Python client: what it puts on the wire is read too
    def on_the_wire(request: httpx.Request) -> None:
        seen.add(f"client sent {request.method} {request.url.path}", request.read())

    spool = tmp_path / "spool.jsonl"
    for strict in (False, True):
        client = AgentClient(url, secret, strict=strict, spool_path=spool)
        client.http.event_hooks["request"].append(on_the_wire)
        assert client.refresh_policies()
        track = client.track("crm-agent", "crm_api", "lookup", attempted=corpus.attempted(30))
        with pytest.raises(PermissionError), track:
            raise PermissionError(corpus.exception_text())
        client.report(corpus.success(30), agent="crm-agent", source="crm_api")
        running = client.start("crm-agent", "crm_api", "lookup", attempted=corpus.attempted(30))
        client.finish(running["id"], PermissionError(corpus.exception_text()), source="crm_api")
        assert client.flush(20)
        client.close()
    seen.add("client spool", spool.read_bytes() if spool.exists() else b"")

    # MCP: a finished run reported through the tool
    async def over_mcp() -> None:
        async with over_http(url, secret)() as mcp:
            outcome = {k: v for k, v in corpus.envelope(26).items() if k != "chain"}
            arguments = {"agent": "crm-agent", "source": "crm_api", "outcome": outcome}
            result = await mcp.call_tool("report_run", arguments)
            seen.add("MCP report_run", json.dumps(answer(result)))

    anyio.run(over_mcp)

    # An escalation's reason, and an operator's resolution with an edited input
    client = AgentClient(url, secret, strict=True)
    client.http.event_hooks["request"].append(on_the_wire)
    escalated = client.escalate(single["id"], f"stuck again: {corpus.exception_text()}")
    client.close()
    browser = operator_session(url)
    item_page = f"/review/{escalated.id}/"
    page = seen.add("review item before", browser.get(item_page).text)
    headers = {"Referer": f"{url}{item_page}"}
    claimed = browser.post(
        f"{item_page}claim/", data={"csrfmiddlewaretoken": csrf(page)}, headers=headers
    )
    resolved = browser.post(
        f"{item_page}resolve/",
        headers=headers,
        data={
            "csrfmiddlewaretoken": csrf(claimed.text),
            "resolution": "retry_edited",
            "note": f"rotated: the new key is {corpus.OPENAI_KEY}",
            "edited_input": json.dumps(corpus.attempted(12)),
        },
    )
    assert ReviewItem.objects.get(pk=escalated.id).state == "resolved", resolved.text
    hook = WebhookDelivery.objects.get(item_id=escalated.id)
    assert webhooks.deliver(hook.pk) == "delivered"
    for _, body in receiver.requests:
        seen.add("webhook body", body)

    # Read everything back
    runs = list(Run.objects.order_by("pk"))
    assert len(runs) >= 9 and any(run.trace_id for run in runs)
    assert {run.scrubbed_fields > 0 for run in runs if run.source == "crm_api"} == {True}
    for run in runs:
        page = seen.add(f"run page {run.pk}", browser.get(f"/runs/{run.pk}/").text)
        assert not run.scrubbed_fields or ("[Filtered]" in page and "Secrets filtered" in page)
        seen.answer(f"GET /runs/{run.pk}", api.get(f"/runs/{run.pk}"))
    for path in (
        item_page,
        "/review/",
        "/runs/",
        "/runs/?q=ACME",
        "/search/?q=ACME",
        "/runs/export/?format=csv",
        "/runs/export/?format=jsonl",
    ):
        response = browser.get(path)
        assert response.status_code == 200, (path, response.text[:500])
        seen.add(path, response.content)
    for path in (
        "/runs?limit=500",
        "/runs/export?format=csv",
        "/runs/export?format=jsonl",
        f"/reviews/{escalated.id}",
        "/reviews",
        "/policies",
        "/policies/versions",
    ):
        seen.answer(f"GET {path}", api.get(path))
    assert receiver.requests and re.search(r"\[Filtered\]", seen.texts[-1][1] + str(seen.texts))
    assert signing
    seen.add("server log", log.read_bytes())

    assert seen.leaks() == []
    assert "[Filtered]" in " ".join(text for where, text in seen.texts if where == "webhook body")
