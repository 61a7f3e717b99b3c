"""Slow clients against the web server as shipped (`config.serve`, PostgreSQL): 200 clients
trickling a request head and 200 trickling a body, one byte a second, cost the others nothing.
Reports sent meanwhile are all stored, the probes keep answering, a body that does not arrive in
time gets a 408 and its connection is closed. The figures (p99 against a baseline) are
benchmarks/slow_clients.py's; here each exchange has a generous bound, never a measure."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from orchestrator.models import ApiToken, Run
from tests.api.helpers import ok_run, web_env
from tests.services import start_web

SLOW = 200  # clients of each kind
SECONDS = 15
BODY_LENGTH = 2075
BOUND = 8.0  # seconds an answer may take on a loaded machine: a bound, never a measure


async def trickle(host: str, port: int, head: bytes, until: float) -> list[bytes]:
    """Send `head`, then a byte a second until the server answers or closes, or `until`;
    return what the server sent before it closed (empty when it never answered)."""
    reader, writer = await asyncio.open_connection(host, port)
    answer = asyncio.ensure_future(reader.read())
    loop = asyncio.get_running_loop()
    try:
        writer.write(head)
        while loop.time() < until and not answer.done():
            await asyncio.wait([answer], timeout=1.0)
            if not answer.done():
                writer.write(b"x")
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
        return [await asyncio.wait_for(answer, BOUND)] if answer.done() else []
    except (ConnectionError, TimeoutError):
        return []
    finally:
        answer.cancel()
        writer.close()


async def scenario(url: str, secret: str) -> dict:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    loop = asyncio.get_running_loop()
    until = loop.time() + SECONDS
    head = f"POST /api/v1/runs HTTP/1.1\r\nHost: {host}\r\nX-Slow: ".encode()
    body_head = (
        f"POST /api/v1/runs HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {secret}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {BODY_LENGTH}\r\n\r\n"
    ).encode()
    heads = [asyncio.ensure_future(trickle(host, port, head, until)) for _ in range(SLOW)]
    bodies = [asyncio.ensure_future(trickle(host, port, body_head, until)) for _ in range(SLOW)]
    await asyncio.sleep(1)  # every slow client connected and trickling
    reports, probes = [], []
    auth = {"Authorization": f"Bearer {secret}"}
    async with httpx.AsyncClient(base_url=url, timeout=BOUND) as client:
        index = 0
        while loop.time() < until - 1:
            run = client.post(
                "/api/v1/runs", json=ok_run(topic=f"beside-slow-{index}"), headers=auth
            )
            reports.append(asyncio.ensure_future(run))
            for path in ("/healthz", "/readyz"):
                probes.append(asyncio.ensure_future(client.get(path)))
            index += 1
            await asyncio.sleep(0.1)
        answered = await asyncio.gather(*reports, *probes, return_exceptions=True)
    return {
        "reports": answered[: len(reports)],
        "probes": answered[len(reports) :],
        "heads": await asyncio.gather(*heads),
        "bodies": await asyncio.gather(*bodies),
    }


@pytest.mark.slow
@pytest.mark.serial  # 400 connections and a server's timeouts on a shared machine
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_slow_clients_cost_the_others_nothing_and_are_cut_off(postgres, tmp_path: Path):
    _, secret = ApiToken.issue("beside-slow-clients")
    settings = {
        "WEB_CONCURRENCY": "1",
        "WEB_HEADER_TIMEOUT_MS": "3000",
        "WEB_BODY_TIMEOUT_MS": "3000",
        # A loaded machine may keep the only process from its slots for a while: the reports
        # wait for one rather than being shed, so that a lost one can only be the slow clients'.
        "WEB_QUEUE_MS": "5000",
        "WEB_ACCESS_LOG": "0",
    }
    server, url = start_web(web_env(tmp_path), tmp_path / "web.log", **settings)
    try:
        seen = asyncio.run(scenario(url, secret))
    finally:
        server.stop()

    reports = seen["reports"]
    assert all(isinstance(r, httpx.Response) and r.status_code == 201 for r in reports), [
        r if not isinstance(r, httpx.Response) else r.status_code for r in reports
    ]
    assert Run.objects.filter(topic__startswith="beside-slow-").count() == len(reports)
    probes = seen["probes"]
    assert all(isinstance(p, httpx.Response) and p.status_code == 200 for p in probes), probes
    # Each slow body was cut off with a 408 in the envelope; each slow head was closed unanswered.
    statuses = [answer[0][:12] for answer in seen["bodies"] if answer]
    assert len(statuses) == SLOW and set(statuses) == {b"HTTP/1.1 408"}, set(statuses)
    envelope = json.loads(seen["bodies"][0][0].split(b"\r\n\r\n", 1)[1])
    assert envelope["failure_type"] == "timeout"
    assert all(answer == [b""] for answer in seen["heads"])
