"""Waking the requests that wait for a row to change: PostgreSQL's LISTEN/NOTIFY, one listening
connection per process (outside Django's pool: a LISTEN lives as long as its session).

A waiter registers before it checks the row, so a change committed between its check and its
sleep still wakes it. SQLite, and a listener reconnecting, fall back to a bounded poll.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable

from django.db import connection

logger = logging.getLogger(__name__)

# A review item was resolved; the payload is its id.
REVIEW_RESOLVED = "failsight_review_resolved"
SQLITE_POLL_SECONDS = 0.5
LISTEN_TICK_SECONDS = 5.0
RECONNECT_SECONDS = 1.0


def announce(channel: str, pk: int) -> None:
    """NOTIFY `channel` with `pk`, heard only once the current transaction commits."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, %s)", [channel, str(pk)])


def wait_for(channel: str, pk: int, timeout: float, check: Callable[[], bool]) -> bool:
    """Return True as soon as `check()` is true, False once `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    if check():
        return True
    if connection.vendor != "postgresql":
        return _poll(deadline, check)
    listener = Listener.for_channel(channel)
    event = listener.register(pk)
    try:
        listener.ready.wait(min(timeout, 2.0))  # its LISTEN must precede our check
        while True:
            if check():
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            _release_connection()
            wait = remaining if listener.ready.is_set() else min(remaining, SQLITE_POLL_SECONDS)
            event.wait(wait)
            event.clear()
    finally:
        listener.unregister(pk, event)


def _poll(deadline: float, check: Callable[[], bool]) -> bool:
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(remaining, SQLITE_POLL_SECONDS))
        if check():
            return True


def _release_connection() -> None:
    if not connection.in_atomic_block:
        connection.close()


class Listener:
    _instances: dict[str, Listener] = {}
    _lock = threading.Lock()

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.pid = os.getpid()
        self.ready = threading.Event()
        self._waiters: dict[int, set[threading.Event]] = defaultdict(set)
        self._waiters_lock = threading.Lock()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"listen-{channel}", daemon=True)
        self.thread.start()

    @classmethod
    def for_channel(cls, channel: str) -> Listener:
        with cls._lock:
            listener = cls._instances.get(channel)
            # A forked child inherits the dict, not the thread: it starts its own.
            if listener is None or listener.pid != os.getpid() or not listener.thread.is_alive():
                listener = cls._instances[channel] = cls(channel)
            return listener

    @classmethod
    def stop_all(cls) -> None:
        """Stop every listener of this process (before a test drops its database)."""
        with cls._lock:
            for listener in cls._instances.values():
                listener._stop.set()
            for listener in cls._instances.values():
                listener.thread.join(LISTEN_TICK_SECONDS + 2)
            cls._instances.clear()

    def register(self, pk: int) -> threading.Event:
        event = threading.Event()
        with self._waiters_lock:
            self._waiters[pk].add(event)
        return event

    def unregister(self, pk: int, event: threading.Event) -> None:
        with self._waiters_lock:
            waiting = self._waiters.get(pk)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self._waiters[pk]

    def _wake(self, pk: int | None = None) -> None:
        with self._waiters_lock:
            events = (
                [e for es in self._waiters.values() for e in es]
                if pk is None
                else list(self._waiters.get(pk, ()))
            )
        for event in events:
            event.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except Exception as exc:
                logger.warning("notify: %s listener lost its connection (%s)", self.channel, exc)
            self.ready.clear()
            self._wake()  # what was announced meanwhile is lost
            self._stop.wait(RECONNECT_SECONDS)

    def _listen(self) -> None:
        import psycopg

        params = connection.get_connection_params() | {"autocommit": True}
        for name in ("cursor_factory", "pool", "context"):
            params.pop(name, None)
        with psycopg.connect(**params) as conn:
            conn.execute(f'LISTEN "{self.channel}"')
            self.ready.set()
            self._wake()  # a waiter that checked before we listened checks once more
            while not self._stop.is_set():
                for note in conn.notifies(timeout=LISTEN_TICK_SECONDS):
                    with contextlib.suppress(ValueError):
                        self._wake(int(note.payload))
                    if self._stop.is_set():
                        break
