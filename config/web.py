"""The web stack as served (`python -m config.serve`: granian's ASGI interface), in the order a
request meets it:

1. the probes (`/healthz`, `/readyz`) go straight to Django on threads of their own, past the
   body reading and the admission: a process whose work slots are full still says it is alive;
2. the body is read whole on the event loop, under WEB_BODY_TIMEOUT_MS (408) and
   API_MAX_BODY_BYTES (413); a chunked one is handed on with its length. A client sending
   slowly costs a coroutine, never a thread;
3. the admission (`orchestrator.api.overload`): WEB_THREADS requests at once, a fast 503 for
   the excess, the slot held until the answer is sent to its end (a streamed export too);
4. Django's WSGI app (`config.wsgi`, the MCP endpoint mounted at /mcp) on a thread pool, through
   a2wsgi, with the buffered body.

An ASGI app in `mounts` (by path prefix) is served natively in step 4 instead, after the same
body reading and admission.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from a2wsgi import WSGIMiddleware
from django.conf import settings

from config import serve, wsgi  # wsgi loads Django and settles its heap
from orchestrator.api import overload
from orchestrator.api.errors import ApiError, WsgiApp, error_answer, invalid, too_big
from orchestrator.health import PATHS as PROBES
from orchestrator.vocabulary import FailureCategory

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]

PROBE_THREADS = 2


class Web:
    """The ASGI app: probes, body, admission, then `work` (WSGI) or one of `mounts` (ASGI)."""

    def __init__(
        self,
        work: WsgiApp,
        probes: WsgiApp,
        serving: serve.Serving,
        mounts: dict[str, AsgiApp] | None = None,
    ) -> None:
        self.admission = overload.Admission(
            slots=serving.threads,
            queue_ms=serving.queue_ms,
            waiting=serving.waiting,
            idling=serving.long_polls,
        )
        # Only admitted requests reach the pool: the working and the long polls waiting idle.
        workers = serving.threads + serving.long_polls
        self.work = WSGIMiddleware(overload.carried(work), workers=workers)
        self.probes = WSGIMiddleware(probes, workers=PROBE_THREADS)
        self.body_timeout = serving.body_timeout_ms / 1000
        self.mounts = mounts or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] != "http":
            await send({"type": "websocket.close", "code": 1000})
            return
        if scope["path"] in PROBES and scope["method"] in ("GET", "HEAD"):
            await self.probes(scope, replay(b"", receive), send)
            return
        try:
            body = await read_body(scope, receive, self.body_timeout)
        except ApiError as error:
            # The rest of the request may still be on its way: the connection cannot serve
            # another one.
            await respond(send, *error_answer(scope["method"], scope["path"], error), close=True)
            return
        await self.admitted(with_length(scope, body), replay(body, receive), send)

    async def admitted(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not await self.admission.enter():
            # Said in the answer too, so that the connection closes whatever the server makes of it.
            close = "close" in (header(scope, b"connection") or "").lower()
            await respond(send, *overload.shed(scope["method"], scope["path"]), close=close)
            return
        token = overload.current.set(self.admission)
        try:
            await self.route(scope["path"])(scope, receive, send)
        finally:
            overload.current.reset(token)
            self.admission.leave()

    def route(self, path: str) -> AsgiApp:
        for prefix, app in self.mounts.items():
            if path == prefix or path.startswith(prefix + "/"):
                return app
        return self.work


async def lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def read_body(scope: Scope, receive: Receive, timeout: float) -> bytes:
    """The request's body, whole, within `timeout` seconds and API_MAX_BODY_BYTES; raise the
    ApiError to answer otherwise (a body the server decoded as malformed chunks, or one shorter
    than its Content-Length, ends in a disconnect)."""
    limit = settings.API_MAX_BODY_BYTES
    chunked = "chunked" in (header(scope, b"transfer-encoding") or "").lower()
    declared = header(scope, b"content-length")
    length = int(declared) if declared and declared.isdigit() and not chunked else None
    if length is not None and length > limit:
        raise too_big()  # refused unread
    pieces: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    raise cut_off(size, length, chunked)
                piece = message.get("body", b"")
                size += len(piece)
                if size > limit:
                    raise too_big()  # stop reading: the rest never reaches memory
                pieces.append(piece)
                if not message.get("more_body", False):
                    return b"".join(pieces)
    except TimeoutError:
        raise too_slow(timeout, size) from None


def too_slow(timeout: float, size: int) -> ApiError:
    return ApiError(
        408,
        FailureCategory.TIMEOUT,
        f"The body did not arrive within {timeout:g} s ({size} bytes came); nothing was done.",
        alternatives=["send the whole request at once, on a connection that keeps up"],
    )


def cut_off(size: int, length: int | None, chunked: bool) -> ApiError:
    if chunked:
        return invalid("The chunked body is malformed or ended early.", status=400)
    return invalid(
        f"The body ended after {size} of the {length} bytes its Content-Length declares.",
        status=400,
    )


def with_length(scope: Scope, body: bytes) -> Scope:
    """`scope` for a body now read whole: Content-Length its length, no Transfer-Encoding (Django
    reads a body by its Content-Length only)."""
    headers = [
        (name, value)
        for name, value in scope["headers"]
        if name.lower() not in (b"content-length", b"transfer-encoding")
    ]
    if body or len(headers) < len(scope["headers"]):
        headers.append((b"content-length", str(len(body)).encode()))
    return {**scope, "headers": headers}


def replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` giving the body read already, then what the connection says next."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed


async def respond(
    send: Send, status: int, headers: list[tuple[str, str]], body: bytes, close: bool = False
) -> None:
    raw = [(name.lower().encode(), value.encode()) for name, value in headers]
    if close:
        raw.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


application = Web(
    work=wsgi.application,
    probes=wsgi.without_process_environment(wsgi.django_application),
    serving=serve.from_env(),
)
