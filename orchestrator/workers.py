"""Celery's workers and queues as the broker shows them.

Workers are heard through Celery's event stream (`celery.events`): each worker announces itself,
sends a `worker-heartbeat` every interval with its count of active tasks, and a `worker-offline`
on a warm shutdown. These travel on the event exchange, not on remote control (pidbox), which
stays off: with it on, a Redis outage while a task runs makes the worker exit
(tests/orchestrator/test_broker_outage.py). A listener hears only what is sent while it listens,
so each listen lasts one heartbeat interval and a margin, and what it heard is kept in the cache
for the next one: a worker that went quiet is shown gone with its last heartbeat.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from typing import Any

from celery import current_app
from celery.events.receiver import EventReceiver
from django.core.cache import cache
from kombu import Connection
from kombu.exceptions import ChannelError, OperationalError

logger = logging.getLogger(__name__)

# Celery's default `--heartbeat-interval`; a heartbeat carries the worker's own.
HEARTBEAT_SECONDS = 2.0
# Beyond its interval, how late a heartbeat may be before the worker counts as gone.
HEARTBEAT_MARGIN = 1.0
LISTEN_SECONDS = HEARTBEAT_SECONDS + HEARTBEAT_MARGIN
BROKER_TIMEOUT = 2.0
HEARD_KEY = "failsight:workers-heard"
# A worker gone this long is no longer listed.
FORGET_SECONDS = 3600
WORKER_EVENTS = ("worker-online", "worker-heartbeat", "worker-offline")


class BrokerUnavailable(Exception):
    """The broker could not be reached or listened to within the timeout."""


@dataclass(frozen=True)
class WorkerSeen:
    """A worker as its last events described it; times are this machine's (epoch seconds)."""

    hostname: str
    heard_at: float
    freq: float = HEARTBEAT_SECONDS
    active: int = 0
    processed: int = 0
    loadavg: tuple[float, ...] = ()
    stopped_at: float | None = None

    def online(self, now: float) -> bool:
        """Return True unless it said it stopped or its heartbeat is late past the margin."""
        return self.stopped_at is None and now - self.heard_at <= self.freq + HEARTBEAT_MARGIN

    def silent_for(self, now: float) -> float:
        return max(0.0, now - self.heard_at)


def broker_connection(timeout: float = BROKER_TIMEOUT) -> Connection:
    """A connection to the broker that tries once and gives up after `timeout` seconds."""
    options = {"max_retries": 0, "socket_timeout": timeout, "socket_connect_timeout": timeout}
    return current_app.connection_for_read(connect_timeout=timeout, transport_options=options)


def has_event_stream(conn: Connection) -> bool:
    """Whether workers' heartbeats are listened to on this broker. Not on kombu's filesystem
    transport: it writes a fanout message as a file for each bound queue, and a listener that
    died before unbinding would leave a queue gathering every heartbeat, unread, in the folder
    each consumer lists at every poll; its workers run without heartbeats."""
    return conn.transport.driver_type != "filesystem"


@contextmanager
def _bounded(conn: Connection) -> Iterator[Connection]:
    try:
        conn.ensure_connection(max_retries=0, timeout=BROKER_TIMEOUT)
        yield conn
    except (OSError, OperationalError, *conn.connection_errors, *conn.channel_errors) as exc:
        logger.warning("broker unavailable: %s", exc)
        raise BrokerUnavailable(str(exc)) from exc


class Listener(EventReceiver):
    """Celery's event receiver for the workers' events, stopping after a while (its own
    timeout only counts silence) and connecting once."""

    connect_max_retries = 0

    def __init__(self, conn: Connection, seconds: float) -> None:
        self.heard: dict[str, WorkerSeen] = {}
        self.deadline = time.monotonic() + seconds
        handlers = dict.fromkeys(WORKER_EVENTS, self.on_event)
        super().__init__(conn, handlers=handlers, routing_key="worker.#", app=current_app)

    def on_iteration(self) -> None:
        self.should_stop = time.monotonic() >= self.deadline

    def on_event(self, event: dict[str, Any]) -> None:
        name = event.get("hostname")
        if not name:
            return
        at = float(event.get("local_received") or time.time())
        if event["type"] == "worker-offline":
            before = self.heard.get(name) or WorkerSeen(name, heard_at=at)
            self.heard[name] = replace(before, stopped_at=at)
            return
        self.heard[name] = WorkerSeen(
            hostname=name,
            heard_at=at,
            freq=float(event.get("freq") or HEARTBEAT_SECONDS),
            active=int(event.get("active") or 0),
            processed=int(event.get("processed") or 0),
            loadavg=tuple(event.get("loadavg") or ()),
        )


def reachable(conn: Connection) -> bool:
    """True once connected; BrokerUnavailable when the broker did not answer in time."""
    with _bounded(conn):
        return True


def listen(conn: Connection, seconds: float = LISTEN_SECONDS) -> dict[str, WorkerSeen]:
    """Hear the workers' events for `seconds`; return the last state of each worker heard."""
    with _bounded(conn):
        listener = Listener(conn, seconds)
        try:
            for _ in listener.consume(timeout=seconds + 1, safety_interval=0.25, wakeup=False):
                pass
        except TimeoutError:
            pass  # nothing at all was sent
    return listener.heard


def remembered() -> tuple[float | None, dict[str, WorkerSeen]]:
    """When the workers were last listened to (by any web process, when the cache is shared)
    and what was heard of each then."""
    found = cache.get(HEARD_KEY) or {}
    try:
        known = {name: WorkerSeen(**fields) for name, fields in found.get("workers", {}).items()}
    except TypeError:  # kept by another version of this code: heard anew at the next listen
        return None, {}
    return found.get("at"), known


def remember(heard: dict[str, WorkerSeen], now: float) -> dict[str, WorkerSeen]:
    """Merge what a listen heard at `now` into what earlier ones did; return every worker
    still listed."""
    known = remembered()[1] | heard
    kept = {n: w for n, w in known.items() if w.silent_for(now) < FORGET_SECONDS}
    entry = {"at": now, "workers": {n: asdict(w) for n, w in kept.items()}}
    cache.set(HEARD_KEY, entry, FORGET_SECONDS)
    return kept


def queue_depths(conn: Connection, names: list[str] | None = None) -> dict[str, int]:
    """Messages waiting in each queue the app sends to (Redis: the list's length). A queue the
    broker does not know holds nothing: Redis deletes an emptied list."""
    depths = {}
    with _bounded(conn):
        for name in names or sorted(current_app.amqp.queues):
            with conn.channel() as channel:
                try:
                    depths[name] = channel.queue_declare(queue=name, passive=True).message_count
                except ChannelError:
                    depths[name] = 0
    return depths
