"""Load shedding and abandoned requests: work nobody will read is not done.

Under overload a server that processes every request in turn answers each one later than the
last, until every answer comes after its client's timeout: all the work is wasted and the
clients retry on top of it. `Shedding` wraps the WSGI application (`config.wsgi`) and refuses
two kinds of request before Django sees them:

- one that waited longer than WEB_SHED_AFTER_MS for a thread (the worker of `config.server`
  says when it was queued): a 503 at once, in the error envelope with `Retry-After`, so the
  client backs off while the requests that can still be answered in time are. Once a request
  has been shed the process is overloaded, and until no request has been shed for
  OVERLOAD_SECONDS the bar is WEB_SHED_UNDER_LOAD_MS instead (as CoDel drops at a short target
  once a queue stands): at the long bar every shed request held its client's connection for the
  whole of it, so at twice the capacity (single reports, 2 cores) the clients' 512 connections
  were all waiting on 503s to come and new requests timed out waiting for a connection (1,482
  timeouts in 30,000, 503 p99 2 s). At the short bar the queue drains to that wait and the
  refusals come back within a few dozen milliseconds;
- one whose client has already gone (it timed out and closed the connection while the request
  waited): nothing is processed and nothing is stored; the answer (499, as nginx logs it) is
  written to nobody.

Refusing costs a few dozen microseconds, not a pass through Django's handler and middleware: a
refusal must stay much cheaper than serving, or an overloaded server spends its time refusing
until it serves nobody. For the same reason the worker asks this class for its bar
(`bar_ms`, `door_bar_ms`), answers with `shed`'s 503 and refuses most late requests itself, before
gunicorn parses them (`config.server`); this middleware refuses the rest. Without that worker
(`runserver`, the test client) no queue time is known and nothing is shed.
"""

from __future__ import annotations

import io
import logging
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any

import orjson
from django.conf import settings

from orchestrator.api.errors import ApiError, envelope, envelope_headers
from orchestrator.vocabulary import FailureCategory

logger = logging.getLogger(__name__)

# Set by config.server.ThreadWorker: when the connection was queued for a thread (monotonic).
QUEUED_AT = "failsight.queued_at"
# What a shed request's client should wait before sending it again.
SHED_RETRY_AFTER = 1.0
# How long a process stays overloaded (shedding at WEB_SHED_UNDER_LOAD_MS) after its last shed.
OVERLOAD_SECONDS = 1.0
_PEEK = socket.MSG_PEEK | socket.MSG_DONTWAIT

Environ = dict[str, Any]
StartResponse = Callable[..., Any]


class Shedding:
    """WSGI middleware: shed late requests, drop abandoned ones, pass the rest to `app`."""

    def __init__(self, app: Callable[[Environ, StartResponse], Iterable[bytes]]) -> None:
        self.app = app
        # Until when (monotonic) this process counts as overloaded. Threads share it; a lost
        # update between two of them only moves the end of the overload by a few microseconds.
        self.overloaded_until = 0.0

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        waited = queue_time_ms(environ)
        if waited is not None:
            now = time.monotonic()
            limit = self.bar_ms(now)
            if limit and waited > limit:
                self.note_shed(now)
                return _answer(start_response, *shed(environ, waited))
        if client_gone(environ):
            method, path = environ.get("REQUEST_METHOD"), environ.get("PATH_INFO")
            logger.info("%s %s: the client left before it was served", method, path)
            return _answer(start_response, "499 Client Closed Request", {}, b"")
        return self.app(environ, start_response)

    def bar_ms(self, now: float) -> int:
        """How long a request may have waited at `now` (monotonic) before it is shed; 0: never.
        The short bar while overloaded (a shed in the last OVERLOAD_SECONDS), else the long one.
        The web worker (`config.server`) asks it too, to refuse before a request is parsed."""
        limit = settings.WEB_SHED_AFTER_MS
        if limit and self.overloaded(now) and settings.WEB_SHED_UNDER_LOAD_MS:
            return min(limit, settings.WEB_SHED_UNDER_LOAD_MS)
        return limit

    def door_bar_ms(self, now: float) -> int:
        """The bar for the oldest request still waiting for a thread, past which the web worker
        refuses a newcomer at once (`config.server`): the short bar while overloaded; 0 (no
        refusal at the door) otherwise, or when there is no short bar."""
        if settings.WEB_SHED_UNDER_LOAD_MS and self.overloaded(now):
            return self.bar_ms(now)
        return 0

    def overloaded(self, now: float) -> bool:
        """Whether this process shed a request in the last OVERLOAD_SECONDS."""
        return now < self.overloaded_until

    def note_shed(self, now: float) -> None:
        """A request was shed at `now`: the process is overloaded for OVERLOAD_SECONDS more."""
        self.overloaded_until = now + OVERLOAD_SECONDS


def _answer(
    start_response: StartResponse, status: str, headers: dict[str, str], body: bytes
) -> list[bytes]:
    start_response(status, [*headers.items(), ("Content-Length", str(len(body)))])
    return [body]


def queue_time_ms(environ: Environ) -> float | None:
    """Milliseconds the request waited for a thread, when the server said when it was queued."""
    queued_at = environ.get(QUEUED_AT)
    return None if queued_at is None else (time.monotonic() - queued_at) * 1000


def shed(environ: Environ, waited: float | str) -> tuple[str, dict[str, str], bytes]:
    """The 503 of a request shed after waiting `waited` ms (or for the reason given): status,
    headers, body."""
    if not isinstance(waited, str):
        waited = f"this request waited {waited:.0f} ms"
    detail = f"The server is overloaded ({waited}); nothing was done."
    path = environ.get("PATH_INFO", "")
    alternatives = ["retry after Retry-After seconds (with the same Idempotency-Key)"]
    if not path.startswith("/api/"):
        headers = {"Content-Type": "text/plain; charset=utf-8", "Retry-After": "1"}
        return "503 Service Unavailable", headers, detail.encode()
    alternatives.append("report runs in batches (POST /api/v1/runs/batch)")
    error = ApiError(
        503,
        FailureCategory.SERVER_FAULT,
        detail,
        retry_after=SHED_RETRY_AFTER,
        alternatives=alternatives,
    )
    body = orjson.dumps(envelope(error, f"{environ.get('REQUEST_METHOD')} {path}"))
    headers = {"Content-Type": "application/json"} | envelope_headers(error)
    return "503 Service Unavailable", headers, body


def client_gone(environ: Environ) -> bool:
    """Return True if the client closed its connection (known only behind gunicorn).

    The body is read first when it is small enough to keep (Django reads it anyway): a client
    that sent its request and hung up leaves the end of the stream right behind the body, where
    a peek at the socket sees it. An HTTP client does not half-close a connection it still
    expects an answer on, so the end of the stream means it left.
    """
    sock = environ.get("gunicorn.socket")
    if sock is None:
        return False
    try:
        body = buffered_body(environ)
        if body is not None and len(body) < declared_length(environ):
            return True  # the body ended early
        return sock.recv(1, _PEEK) == b""
    except BlockingIOError:  # nothing to read yet: still connected
        return False
    except OSError:  # reset
        return True


def buffered_body(environ: Environ) -> bytes | None:
    """Read a body of known, acceptable length and put it back as a buffer (readable again from
    the start); return it, shorter than its Content-Length if it ended early. None when it is
    not read this way: chunked (ChunkedBodyMiddleware reads it), no or no valid length, or too
    large (Django refuses it, 413, without reading it)."""
    if "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower():
        return None
    length = declared_length(environ)
    if not 0 < length <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        return None
    body = environ["wsgi.input"].read(length)
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def declared_length(environ: Environ) -> int:
    """The request's Content-Length, 0 when it has none or an invalid one."""
    try:
        return int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0
