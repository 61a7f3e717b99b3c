"""The web server's worker: gunicorn's threaded worker, telling the app how long a request waited.

gunicorn's `gthread` worker hands each readable connection to a pool of threads; under overload
the connections queue up in front of that pool, and a request served after its client gave up is
work for nobody. This worker passes the app when the request arrived, as `environ[QUEUED_AT]` (a
`time.monotonic()` value), so that `orchestrator.api.overload` (around the application in
`config.wsgi`) can answer a request that waited too long with a fast 503 instead of processing
it late.

When it arrived is the earlier of two readings: when the worker queued the connection for a
thread, and (on Linux, over TCP) when the kernel last received bytes on it (`TCP_INFO`'s
`tcpi_last_data_recv`, in milliseconds). The second also counts the time a connection sat in the
kernel's accept queue and in front of the worker's own loop, which the first cannot see: once
both CPUs are busy that is where the wait grows, and a request that waited 1.5 s there looked
fresh and was served late instead of shed.

    gunicorn config.wsgi --worker-class config.server.ThreadWorker --threads 8
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from gunicorn.workers.gthread import ThreadWorker as GunicornThreadWorker

QUEUED_AT = "failsight.queued_at"  # the name orchestrator.api.overload reads
# struct tcp_info (linux/tcp.h): eight u8 fields, then u32 fields; tcpi_last_data_recv is the
# twelfth u32 (after rto, ato, snd_mss, rcv_mss, unacked, sacked, lost, retrans, fackets,
# last_data_sent, last_ack_sent).
_TCP_INFO_SIZE = 104
_LAST_DATA_RECV_OFFSET = 52

_handling = threading.local()


def arrived_at(sock: Any, now: float) -> float | None:
    """When the kernel last received bytes on `sock` (monotonic), or None where it cannot say
    (not Linux, not TCP)."""
    option = getattr(socket, "TCP_INFO", None)
    if option is None or sock is None:
        return None
    with contextlib.suppress(OSError, struct.error):
        info = sock.getsockopt(socket.IPPROTO_TCP, option, _TCP_INFO_SIZE)
        (since_ms,) = struct.unpack_from("I", info, _LAST_DATA_RECV_OFFSET)
        return now - since_ms / 1000
    return None


class ThreadWorker(GunicornThreadWorker):
    def enqueue_req(self, conn: Any) -> None:
        conn.queued_at = time.monotonic()
        super().enqueue_req(conn)

    def handle(self, conn: Any) -> Any:
        _handling.queued_at = getattr(conn, "queued_at", None)
        _handling.sock = getattr(conn, "sock", None)
        return super().handle(conn)

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.wsgi = _with_queue_time(self.wsgi)


def _with_queue_time(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        queued_at = getattr(_handling, "queued_at", None)
        if queued_at is not None:
            arrived = arrived_at(getattr(_handling, "sock", None), time.monotonic())
            environ[QUEUED_AT] = queued_at if arrived is None else min(queued_at, arrived)
        return app(environ, start_response)

    return wrapped
