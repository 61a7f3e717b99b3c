"""The web stack as served (`config.web`), driven as granian drives it: ASGI messages on an event
loop, the WSGI apps behind it on a2wsgi's real threads. The server's own side of a socket (slow
clients, framing) is tested against the real server in tests/api/test_http_framing.py and
tests/api/test_slow_clients.py."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from config import serve, wsgi
from config.web import Web
from tests.api.helpers import ENVELOPE_KEYS


def serving(**changes: Any) -> serve.Serving:
    settings = dict(
        host="127.0.0.1",
        port=0,
        processes=1,
        threads=1,
        queue_ms=0,
        long_polls=0,
        header_timeout_ms=1000,
        body_timeout_ms=5000,
        backlog=128,
        access_log=False,
    )
    return serve.Serving(**(settings | changes))


class Exchange:
    """One request through the ASGI app: the body in `pieces` (more may be given later with
    `give`), the answer's messages collected."""

    def __init__(self, path: str, method: str = "POST", headers: list[tuple[bytes, bytes]] = ()):
        self.scope = {
            "type": "http",
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(b"host", b"127.0.0.1:8000"), *headers],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
        }
        self.incoming: asyncio.Queue[dict] = asyncio.Queue()
        self.received = 0
        self.sent: list[dict] = []
        self.started = asyncio.Event()

    def give(self, body: bytes, more: bool = False) -> None:
        self.incoming.put_nowait({"type": "http.request", "body": body, "more_body": more})

    def disconnect(self) -> None:
        self.incoming.put_nowait({"type": "http.disconnect"})

    async def receive(self) -> dict:
        self.received += 1
        return await self.incoming.get()

    async def send(self, message: dict) -> None:
        self.sent.append(message)
        if message["type"] == "http.response.body":
            self.started.set()

    async def through(self, app: Web) -> Exchange:
        await asyncio.wait_for(app(self.scope, self.receive, self.send), 30)
        return self

    @property
    def status(self) -> int:
        return self.sent[0]["status"]

    @property
    def headers(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.sent[0]["headers"]}

    @property
    def body(self) -> bytes:
        return b"".join(m.get("body", b"") for m in self.sent[1:])


def echo(environ: dict, start_response) -> list[bytes]:
    """A WSGI app answering what it was given: its body by its Content-Length, and headers."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    seen = {
        "body": environ["wsgi.input"].read(length).decode(),
        "length": environ.get("CONTENT_LENGTH"),
        "transfer_encoding": environ.get("HTTP_TRANSFER_ENCODING"),
    }
    start_response("201 Created", [("Content-Type", "application/json")])
    return [json.dumps(seen).encode()]


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_the_probes_pass_an_admission_that_refuses_everything_else():
    async def scenario():
        app = Web(wsgi.application, wsgi.django_application, serving())
        assert await app.admission.enter()  # the only slot is taken
        answers = []
        for path in ("/healthz", "/", "/api/v1/runs"):
            exchange = Exchange(path, method="GET")
            exchange.give(b"")
            answers.append(await exchange.through(app))
        return answers

    healthz, page, api = run(scenario())
    assert healthz.status == 200 and json.loads(healthz.body) == {"status": "ok"}
    assert page.status == 503 and api.status == 503
    assert set(json.loads(api.body)) == ENVELOPE_KEYS


def test_only_a_probes_get_and_head_pass_the_admission():
    async def scenario():
        app = Web(echo, echo, serving())
        assert await app.admission.enter()  # the only slot is taken
        answers = []
        for method in ("HEAD", "POST"):
            exchange = Exchange("/healthz", method=method)
            exchange.give(b"")
            answers.append((await exchange.through(app)).status)
        return answers

    assert run(scenario()) == [201, 503]


def test_a_body_sent_slowly_holds_no_work_slot_while_it_arrives():
    async def scenario():
        app = Web(echo, echo, serving())
        slow = Exchange("/api/v1/runs")
        slow.give(b'{"status": ', more=True)
        sending = asyncio.create_task(slow.through(app))
        while slow.received < 2:
            await asyncio.sleep(0.01)  # waits for the rest of its body
        quick = Exchange("/api/v1/runs")
        quick.give(b"{}")
        await quick.through(app)  # the only slot serves it meanwhile
        slow.give(b'"ok"}')
        await sending
        return slow, quick

    slow, quick = run(scenario())
    assert quick.status == 201 and slow.status == 201
    assert json.loads(slow.body)["body"] == '{"status": "ok"}'


def test_a_chunked_body_reaches_the_app_whole_with_its_length():
    async def scenario():
        app = Web(echo, echo, serving())
        exchange = Exchange("/api/v1/runs", headers=[(b"transfer-encoding", b"chunked")])
        exchange.give(b'{"a":', more=True)
        exchange.give(b" 1}")
        return await exchange.through(app)

    seen = json.loads(run(scenario()).body)
    assert seen == {"body": '{"a": 1}', "length": "8", "transfer_encoding": None}


def test_a_body_past_its_deadline_is_a_408_in_the_envelope_and_the_connection_closes():
    called = []

    def app_never_called(environ, start_response):
        called.append(environ)
        return echo(environ, start_response)

    async def scenario():
        app = Web(app_never_called, echo, serving(body_timeout_ms=200))
        exchange = Exchange("/api/v1/runs", headers=[(b"content-length", b"100")])
        exchange.give(b'{"status"', more=True)  # and nothing more
        return await exchange.through(app)

    answer = run(scenario())
    envelope = json.loads(answer.body)
    assert answer.status == 408 and answer.headers["connection"] == "close"
    assert set(envelope) == ENVELOPE_KEYS and envelope["failure_type"] == "timeout"
    assert called == []


def test_a_declared_length_over_the_limit_is_a_413_without_reading_the_body(settings):
    settings.API_MAX_BODY_BYTES = 1024

    async def scenario():
        app = Web(echo, echo, serving())
        exchange = Exchange("/api/v1/runs", headers=[(b"content-length", b"5000")])
        return await exchange.through(app)

    answer = run(scenario())
    assert answer.status == 413 and answer.received == 0
    assert json.loads(answer.body)["failure_type"] == "invalid_input"


def test_a_body_cut_short_by_the_client_is_a_400_naming_its_content_length():
    async def scenario():
        app = Web(echo, echo, serving())
        exchange = Exchange("/api/v1/runs", headers=[(b"content-length", b"10")])
        exchange.give(b"abc", more=True)
        exchange.disconnect()
        return await exchange.through(app)

    answer = run(scenario())
    assert answer.status == 400
    assert "3 of the 10 bytes its Content-Length" in json.loads(answer.body)["detail"]


class Stream:
    """A WSGI app streaming two pieces, the second once the test lets it."""

    def __init__(self) -> None:
        self.go_on = threading.Event()

    def __call__(self, environ, start_response) -> Iterator[bytes]:
        start_response("200 OK", [("Content-Type", "text/csv")])
        return self.pieces()

    def pieces(self) -> Iterator[bytes]:
        yield b"first\n"
        self.go_on.wait(10)
        yield b"second\n"


def test_a_streamed_answer_holds_its_slot_until_its_last_piece_is_sent():
    stream = Stream()

    async def scenario():
        app = Web(stream, echo, serving())
        export = Exchange("/api/v1/runs/export", method="GET")
        export.give(b"")
        streaming = asyncio.create_task(export.through(app))
        await asyncio.wait_for(export.started.wait(), 10)  # the first piece is out
        other = Exchange("/api/v1/runs")
        other.give(b"{}")
        refused = (await other.through(app)).status
        stream.go_on.set()
        await streaming
        return refused, export, app.admission.free

    refused, export, free = run(scenario())
    assert refused == 503
    assert export.status == 200 and export.body == b"first\nsecond\n"
    assert free == 1


def test_an_asgi_app_mounted_gets_the_whole_body_under_the_admission():
    seen: list[tuple[dict, int]] = []

    async def mcp(scope, receive, send) -> None:
        seen.append((await receive(), app.admission.free))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    app = Web(echo, echo, serving(), mounts={"/mcp": mcp})

    async def scenario():
        exchange = Exchange("/mcp", headers=[(b"transfer-encoding", b"chunked")])
        exchange.give(b'{"jsonrpc":', more=True)
        exchange.give(b' "2.0"}')
        return await exchange.through(app)

    assert run(scenario()).status == 200
    message, free = seen[0]
    assert message == {"type": "http.request", "body": b'{"jsonrpc": "2.0"}', "more_body": False}
    assert free == 0  # its slot is held while it answers


@pytest.mark.parametrize("path", ["/mcpx", "/api/v1/runs"])
def test_only_a_mounts_own_paths_reach_it(path):
    app = Web(echo, echo, serving(), mounts={"/mcp": echo})
    assert app.route(path) is app.work
    assert app.route("/mcp/sub") is echo
