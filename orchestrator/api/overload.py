"""Admission: a process works on a few requests at once and refuses the excess at once (503
before Django), since under overload a server that queues everything answers each request after
its client's timeout. It runs on the web server's event loop (`config.web`), after the request's
body has arrived whole: a waiting request costs a coroutine, never a thread, and a slow client
holds no slot."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from orchestrator.api.errors import ApiError, Environ, StartResponse, WsgiApp, error_answer
from orchestrator.vocabulary import FailureCategory

SHED_RETRY_AFTER = 1.0

# The admission of the request a thread works on: a2wsgi runs the WSGI app in a copy of the
# context of the coroutine that admitted it. `carried` puts it in the request's environ, where
# code on other threads (the MCP tools) finds it too.
current: ContextVar[Admission | None] = ContextVar("failsight_admission", default=None)
ADMISSION = "failsight.admission"


class Admission:
    """At most `slots` requests at once, a short wait (`queue_ms`) for at most `waiting` more;
    up to `idling` long polls give their slot back while they wait. Call its coroutines and
    `leave` on one event loop; `idle` from the threads that loop hands requests to."""

    def __init__(self, slots: int, queue_ms: int, waiting: int, idling: int) -> None:
        self.free = slots
        self.bar = queue_ms / 1000
        self.most_waiting = waiting
        self.most_idling = idling
        self.idling = 0
        # Futures of the requests waiting for a slot, first come first served; `leave` hands
        # its slot to the first one still waiting.
        self.queue: deque[asyncio.Future[None]] = deque()
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def waiting(self) -> int:
        return sum(not turn.done() for turn in self.queue)

    async def enter(self) -> bool:
        """Take a slot, waiting up to the bar; False when none came free in time or too many
        wait already."""
        self.loop = asyncio.get_running_loop()
        if self.free and not self.waiting:
            self.free -= 1
            return True
        if self.waiting >= self.most_waiting or self.bar <= 0:
            return False
        turn = self.loop.create_future()
        self.queue.append(turn)
        try:
            await asyncio.wait_for(turn, self.bar)
        except TimeoutError:
            # A slot handed over as the bar passed is kept rather than lost.
            return turn.done() and not turn.cancelled()
        finally:
            if turn in self.queue:
                self.queue.remove(turn)
        return True

    def leave(self) -> None:
        """Give a slot back: to the first request still waiting, else to the pool."""
        while self.queue:
            turn = self.queue.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.free += 1

    async def lend(self) -> bool:
        if self.idling >= self.most_idling:
            return False
        self.idling += 1
        self.leave()
        return True

    async def take_back(self) -> None:
        """A slot for a long poll whose wait is over, ahead of newcomers and however long."""
        self.idling -= 1
        if self.free and not self.waiting:
            self.free -= 1
            return
        turn = asyncio.get_running_loop().create_future()
        self.queue.appendleft(turn)
        await turn

    @contextmanager
    def idle(self) -> Iterator[bool]:
        """While the block waits for an event, the request's slot serves others: yield True, and
        take a slot again at its end. Yield False, keeping the slot, when `idling` requests wait
        so already: the caller answers without waiting. Called from a worker thread."""
        assert self.loop is not None  # set by the `enter` that admitted this request
        allowed = asyncio.run_coroutine_threadsafe(self.lend(), self.loop).result()
        try:
            yield allowed
        finally:
            if allowed:
                asyncio.run_coroutine_threadsafe(self.take_back(), self.loop).result()


def carried(app: WsgiApp) -> WsgiApp:
    """`app`, each request's environ carrying the admission that let it in (for `idle`)."""

    def wsgi(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        environ[ADMISSION] = current.get()
        return app(environ, start_response)

    return wsgi


@contextmanager
def idle(environ: Mapping[str, Any]) -> Iterator[bool]:
    """`Admission.idle` of the request with this environ (`request.META`); outside one (the
    test client, runserver) a block that may wait and holds nothing."""
    admission = environ.get(ADMISSION)
    if admission is None:
        yield True
        return
    with admission.idle() as allowed:
        yield allowed


def shed(method: str, path: str) -> tuple[int, list[tuple[str, str]], bytes]:
    """The 503 of a refused request: status, headers, body (the envelope under /api/ and at
    /mcp, the agents' addresses)."""
    detail = "The server is overloaded; nothing was done."
    alternatives = ["retry after Retry-After seconds (with the same Idempotency-Key)"]
    if not path.startswith(("/api/", "/mcp")):
        body = detail.encode()
        headers = [("Content-Type", "text/plain; charset=utf-8"), ("Retry-After", "1")]
        return 503, [*headers, ("Content-Length", str(len(body)))], body
    if path.startswith("/api/"):
        alternatives.append("report runs in batches (POST /api/v1/runs/batch)")
    error = ApiError(
        503,
        FailureCategory.SERVER_FAULT,
        detail,
        retry_after=SHED_RETRY_AFTER,
        alternatives=alternatives,
    )
    return error_answer(method, path, error)
