"""When a request arrived, as the web worker tells the app (`config.server`): the earlier of the
moment the worker queued the connection for a thread and the moment the kernel last received
bytes on it. The second counts the wait in the kernel's accept queue and in front of the
worker's loop, where an overloaded server's backlog grows; read here on a real TCP connection."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from config import server
from orchestrator.api import overload
from orchestrator.api.overload import QUEUED_AT


@pytest.fixture
def connection() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        accepted, _ = listener.accept()
        with client, accepted:
            client.sendall(b"POST /api/v1/runs HTTP/1.1\r\n\r\n")
            yield accepted


def test_the_kernel_says_when_the_request_bytes_came(connection):
    time.sleep(0.3)
    now = time.monotonic()
    arrived = server.arrived_at(connection, now)
    assert arrived is not None and 0.25 <= now - arrived <= 0.6


def test_a_request_arrived_at_the_earlier_of_queued_and_received(connection):
    time.sleep(0.3)
    now = time.monotonic()
    # Queued just now, but its bytes came 0.3 s ago: it is 0.3 s old.
    assert 0.25 <= now - server.since(now, connection, now) <= 0.6
    # Queued earlier than its bytes were last seen (a slow body): the queueing counts.
    assert server.since(now - 5, connection, now) == now - 5


def test_the_app_is_told_when_the_request_arrived():
    seen = {}

    def app(environ, start_response):
        seen.update(environ)
        return [b""]

    server._handling.queued_at = 123.5
    try:
        server._with_queue_time(app)({}, lambda *a: None)
    finally:
        server._handling.queued_at = None
    assert seen[QUEUED_AT] == 123.5


def test_without_a_tcp_socket_the_queue_time_stands():
    assert server.arrived_at(None, time.monotonic()) is None
    left, right = socket.socketpair()  # a Unix socket: no TCP_INFO
    with left, right:
        assert server.arrived_at(left, time.monotonic()) is None


def test_the_short_bar_lasts_one_quiet_second_after_the_last_shed(settings):
    """Overloaded (a request shed at WEB_SHED_AFTER_MS), a process sheds at the short bar; once
    OVERLOAD_SECONDS passed without a shed, the long bar is back."""
    settings.WEB_SHED_AFTER_MS, settings.WEB_SHED_UNDER_LOAD_MS = 200, 20
    shedding = overload.Shedding(lambda environ, start_response: [b"served"])

    def waited(ms: float) -> bytes:
        statuses = []
        environ = {QUEUED_AT: time.monotonic() - ms / 1000, "PATH_INFO": "/api/v1/runs"}
        body = b"".join(shedding(environ, lambda status, headers: statuses.append(status)))
        return body if not statuses else statuses[0].encode()

    assert waited(100) == b"served"  # not overloaded: 100 ms is within the bar
    assert waited(300).startswith(b"503")
    assert waited(100).startswith(b"503")  # overloaded: the short bar
    assert waited(5) == b"served"
    shedding.overloaded_until = time.monotonic() - 0.001  # a second passed without a shed
    assert waited(100) == b"served"
