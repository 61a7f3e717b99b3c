"""The production topology beyond framing: nginx with the shipped config
(deploy/nginx/failsight.conf.template) in front of the web server as shipped. What the app
believes of the client (its address, its scheme) is what nginx saw, never what the client wrote;
nginx serves the static files itself; a long poll and MCP pass through; and when the app does
not answer, nginx says so in the API's error envelope.

Each belief is also checked against the app alone, where the same request is believed: the
proof that nginx, not the app, makes the difference."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import httpx
import httpx2
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from orchestrator.coordination.actions import do_resolve_review
from orchestrator.models import ApiToken, ReviewItem
from orchestrator.vocabulary import Channel
from tests.api.helpers import ENVELOPE_KEYS, failed_run, web_env
from tests.conftest import require_service
from tests.services import ROOT, PrivateNginx, free_port, manage, nginx_bin, start_web

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

ALLOWED_SCRAPER = "10.9.8.7"  # the only address /metrics lets in without a token
ROOT_STATIC = ROOT / "static"


@dataclass
class Topology:
    app: str  # the web server's own URL, which only the proxy should reach in production
    proxy: PrivateNginx


@pytest.fixture(scope="module")
def topology(django_db_setup, tmp_path_factory) -> Iterator[Topology]:
    require_service(connection.vendor == "postgresql", "PostgreSQL")
    require_service(nginx_bin() is not None, "nginx")
    var = tmp_path_factory.mktemp("proxy")
    env = web_env(
        var,
        TRUSTED_PROXIES="127.0.0.1",
        METRICS_ALLOWED_IPS=ALLOWED_SCRAPER,
        SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO,https",
        SECURE_HSTS_SECONDS="60",
    )
    manage(env, "collectstatic", "--noinput")  # the release step: nginx serves what it writes
    server, url = start_web(env, var / "web.log", WEB_CONCURRENCY="1")
    proxy = None
    try:
        proxy = PrivateNginx(urlsplit(url).netloc, var / "staticfiles").start()
        yield Topology(url, proxy)
    finally:
        if proxy is not None:
            proxy.remove()
        server.stop()


def test_a_forwarded_address_the_client_wrote_is_never_believed_behind_nginx(topology):
    spoofed = {"X-Forwarded-For": ALLOWED_SCRAPER}
    direct = httpx.get(f"{topology.app}/metrics", headers=spoofed, timeout=30)
    assert direct.status_code == 200, direct.text  # the app believes its trusted proxy's header
    proxied = httpx.get(f"{topology.proxy.url}/metrics", headers=spoofed, timeout=30)
    assert proxied.status_code == 403, proxied.text  # nginx wrote the address it saw instead


def test_a_forwarded_scheme_the_client_wrote_is_never_believed_behind_nginx(topology):
    """HSTS goes out on answers to HTTPS only: over plain HTTP to nginx, a client claiming
    HTTPS gets none, as nginx tells the app the scheme it was reached by."""
    claim = {"X-Forwarded-Proto": "https"}
    direct = httpx.get(f"{topology.app}/accounts/login/", headers=claim, timeout=30)
    assert "strict-transport-security" in direct.headers, direct.headers
    proxied = httpx.get(f"{topology.proxy.url}/accounts/login/", headers=claim, timeout=30)
    assert proxied.status_code == 200
    assert "strict-transport-security" not in proxied.headers, proxied.headers


def test_static_files_are_served_by_nginx_from_the_collected_folder(topology):
    collected = topology.proxy.static_root / "css"
    sheet = next(collected.glob("*.css"))
    answer = httpx.get(f"{topology.proxy.url}/static/css/{sheet.name}", timeout=30)
    assert answer.status_code == 200
    assert answer.content == sheet.read_bytes()
    assert answer.headers["cache-control"] == "max-age=3600"  # nginx's `expires`, not the app's
    missing = httpx.get(f"{topology.proxy.url}/static/css/no-such.css", timeout=30)
    assert missing.status_code == 404
    assert set(missing.json()) == ENVELOPE_KEYS
    assert missing.json()["failure_type"] == "resource_missing"


def test_a_long_poll_is_answered_through_nginx_when_the_review_is_resolved(topology):
    secret = ApiToken.issue("proxied-agent")[1]
    operator = User.objects.create_user("olga", password="operator-pass-123", is_staff=True)
    api = httpx.Client(
        base_url=f"{topology.proxy.url}/api/v1",
        headers={"Authorization": f"Bearer {secret}"},
        timeout=60,
    )
    run = api.post("/runs", json=failed_run(topic="long-poll"))
    assert run.status_code == 201, run.text
    item = api.post("/reviews", json={"run": run.json()["id"], "reason": "needs a person"})
    assert item.status_code == 201, item.text
    item_id = item.json()["id"]

    def resolve_soon() -> None:
        try:
            time.sleep(1.0)
            assert do_resolve_review(
                ReviewItem.objects.get(pk=item_id),
                operator,
                "abort",
                channel=Channel.DASHBOARD,
                note="no",
            )
        finally:
            connection.close()  # this thread's

    resolver = threading.Thread(target=resolve_soon)
    resolver.start()
    try:
        answer = api.get(f"/reviews/{item_id}", params={"wait": 30})
    finally:
        resolver.join(30)
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == ReviewItem.State.RESOLVED


def test_mcp_answers_through_nginx(topology):
    secret = ApiToken.issue("proxied-mcp-agent")[1]

    async def tools() -> set[str]:
        headers = {"Authorization": f"Bearer {secret}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(10, read=60)) as http,
            streamable_http_client(f"{topology.proxy.url}/mcp", http_client=http) as (read, write),
            ClientSession(read, write) as mcp,
        ):
            await mcp.initialize()
            return {tool.name for tool in (await mcp.list_tools()).tools}

    assert {"report_run", "classify", "wait_for_resolution"} <= anyio.run(tools)


def test_an_app_that_does_not_answer_is_a_502_in_the_envelope():
    require_service(nginx_bin() is not None, "nginx")
    proxy = PrivateNginx(f"127.0.0.1:{free_port()}", ROOT_STATIC).start()  # nothing listens
    try:
        answer = httpx.post(f"{proxy.url}/api/v1/runs", json=failed_run(), timeout=30)
    finally:
        proxy.remove()
    assert answer.status_code == 502
    body = answer.json()
    assert set(body) == ENVELOPE_KEYS
    assert body["failure_type"] == "server_fault" and body["retryable"] is True
    assert body["attempted"] == {"operation": "POST /api/v1/runs"}
    assert answer.headers["retry-after"] == "1"


@pytest.mark.parametrize(
    ("extra", "status", "detail"),
    [
        (0, 400, "not valid JSON"),  # the app's: the body reached it
        (1, 413, "larger than the proxy accepts"),  # nginx's: the body never reached the app
    ],
    ids=["at", "past"],
)
def test_nginx_bounds_bodies_exactly_where_the_app_does(topology, extra, status, detail):
    """A body of API_MAX_BODY_BYTES reaches the app (which refuses it as JSON: it is spaces);
    one byte more is nginx's 413, in the envelope."""
    secret = ApiToken.issue("bounded-agent")[1]
    answer = httpx.post(
        f"{topology.proxy.url}/api/v1/runs",
        content=b" " * (settings.API_MAX_BODY_BYTES + extra),
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
        timeout=60,
    )
    assert answer.status_code == status, answer.text
    assert set(answer.json()) == ENVELOPE_KEYS
    assert answer.json()["failure_type"] == "invalid_input"
    assert detail in answer.json()["detail"]
