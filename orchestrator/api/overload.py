"""Admission: a process works on a few requests at once and refuses the excess at once (503
before Django), since under overload a server that queues everything answers each request after
its client's timeout. A body is read before its request takes a slot (`read_ahead`): a client
sending slowly holds a server thread, not one of the few slots."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from django.conf import settings

from orchestrator.api.errors import ApiError, Environ, StartResponse, WsgiApp, wsgi_error
from orchestrator.vocabulary import FailureCategory

SHED_RETRY_AFTER = 1.0
IDLE = "failsight.admission.idle"


class Admission:
    """WSGI middleware: at most `slots` requests in `app` at once, a short wait for the rest."""

    def __init__(self, app: WsgiApp, slots: int, queue_ms: int, waiting: int, idling: int) -> None:
        self.app = app
        self.free = slots
        self.bar = queue_ms / 1000
        self.most_waiting = waiting
        self.waiting = 0
        self.most_idling = idling
        self.idling = 0
        self.changed = threading.Condition()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        read_ahead(environ)
        if not self.enter():
            status, headers, body = shed(environ)
            start_response(status, headers)
            return [body]
        environ[IDLE] = self.idle
        try:
            return self.app(environ, start_response)
        finally:
            self.leave()

    def enter(self) -> bool:
        """Take a slot, waiting up to the bar; False when none came free in time or too many
        wait already."""
        with self.changed:
            if self.free and not self.waiting:
                self.free -= 1
                return True
            if self.waiting >= self.most_waiting:
                return False
            self.waiting += 1
            try:
                deadline = time.monotonic() + self.bar
                while not self.free:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return False
                    self.changed.wait(remaining)
                self.free -= 1
                return True
            finally:
                self.waiting -= 1

    def leave(self) -> None:
        with self.changed:
            self.free += 1
            self.changed.notify()

    @contextmanager
    def idle(self) -> Iterator[bool]:
        """While the block waits for an event, the request's slot serves others: yield True, and
        take a slot again (waiting as long as it takes) at its end. Yield False, keeping the
        slot, when `idling` requests wait so already: the caller answers without waiting."""
        with self.changed:
            allowed = self.idling < self.most_idling
            if allowed:
                self.idling += 1
                self.free += 1
                self.changed.notify()
        try:
            yield allowed
        finally:
            if allowed:
                with self.changed:
                    self.idling -= 1
                    while not self.free:
                        self.changed.wait()
                    self.free -= 1


def read_ahead(environ: Environ) -> None:
    """Read a body of a declared, acceptable length now and hand it on as a buffer (a longer
    one Django refuses unread)."""
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return
    if 0 < length <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read(length))


def idle(environ: Environ) -> AbstractContextManager[bool]:
    """`Admission.idle` of the request with this environ; outside one (the test client,
    runserver) a block that may wait and holds nothing."""
    found: Any = environ.get(IDLE)
    return found() if found is not None else nullcontext(True)


def shed(environ: Environ) -> tuple[str, list[tuple[str, str]], bytes]:
    """The 503 of a refused request: status, headers, body (the envelope under /api/ and at
    /mcp, the agents' addresses)."""
    detail = "The server is overloaded; nothing was done."
    path = environ.get("PATH_INFO", "")
    alternatives = ["retry after Retry-After seconds (with the same Idempotency-Key)"]
    if not path.startswith(("/api/", "/mcp")):
        body = detail.encode()
        headers = [("Content-Type", "text/plain; charset=utf-8"), ("Retry-After", "1")]
        return "503 Service Unavailable", [*headers, ("Content-Length", str(len(body)))], body
    if path.startswith("/api/"):
        alternatives.append("report runs in batches (POST /api/v1/runs/batch)")
    error = ApiError(
        503,
        FailureCategory.SERVER_FAULT,
        detail,
        retry_after=SHED_RETRY_AFTER,
        alternatives=alternatives,
    )
    return wsgi_error(environ, error)
