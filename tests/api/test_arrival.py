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


def test_the_app_is_told_the_earlier_of_queued_and_arrived(connection):
    time.sleep(0.3)
    seen = {}

    def app(environ, start_response):
        seen.update(environ)
        return [b""]

    server._handling.queued_at, server._handling.sock = time.monotonic(), connection
    try:
        server._with_queue_time(app)({}, lambda *a: None)
    finally:
        server._handling.queued_at = server._handling.sock = None
    # Queued just now, but its bytes came 0.3 s ago: it is 0.3 s old.
    assert 0.25 <= time.monotonic() - seen[QUEUED_AT] <= 0.6


def test_without_a_tcp_socket_the_queue_time_stands():
    assert server.arrived_at(None, time.monotonic()) is None
    left, right = socket.socketpair()  # a Unix socket: no TCP_INFO
    with left, right:
        assert server.arrived_at(left, time.monotonic()) is None
