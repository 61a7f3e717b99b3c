"""The source-health feed, off the request path: what stored reports say about their sources
(breaker, retry budget, Retry-After hold, calls started inside a hold) is applied by one
background flusher per process, for all the reports that arrived within `DELAY` of each other at
once (a read and one UPDATE a source for the lot), instead of by each report's own request.

The contract it keeps: a report's failure reaches its source's breaker and hold within a second
of its answer (`DELAY`, then one batch's statements). Inside a caller's transaction (a test's,
or a caller that stores reports in its own) the feed is applied at once, in that transaction:
what the commit keeps, the feed keeps. `flush` applies what is pending in the caller's thread:
a decision reads the breaker after this process's reports have reached it.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.db import close_old_connections

logger = logging.getLogger(__name__)

# How long the flusher gathers reports before it applies them: short against the contract's
# second, long enough that a busy process applies dozens at once.
DELAY = 0.1


class Feed:
    """Reports waiting for their sources' health, and the thread that applies them."""

    def __init__(self, apply: Callable[[list[Any]], None], delay: float = DELAY) -> None:
        self._apply = apply
        self._delay = delay
        self._pid = 0
        self._reset()

    def _reset(self) -> None:
        # A forked child inherits the parent's queue and lock but not its thread: start anew.
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._flushing = threading.Lock()  # one batch applied at a time, in report order
        self._wake = threading.Event()
        self._pending: list[Any] = []
        self._thread: threading.Thread | None = None

    def submit(self, items: Sequence[Any]) -> None:
        """Queue `items` (already committed) for the flusher; never blocks on the database."""
        if os.getpid() != self._pid:
            self._reset()
        with self._lock:
            self._pending.extend(items)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="source-feed", daemon=True)
                self._thread.start()
        self._wake.set()

    def flush(self) -> None:
        """Apply what is pending now, in this thread; errors are logged, never raised."""
        if os.getpid() != self._pid:
            self._reset()
        with self._flushing:
            with self._lock:
                items, self._pending = self._pending, []
            if not items:
                return
            try:
                self._apply(items)
            except Exception:
                logger.exception("%d reports stored, but not fed to their sources", len(items))

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            threading.Event().wait(self._delay)  # gather what arrives meanwhile into one batch
            self.flush()
            close_old_connections()  # as a request's end would: a broken connection is not kept
