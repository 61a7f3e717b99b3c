"""The web server's worker: gunicorn's threaded worker, telling the app how long a request waited
and refusing, before it is parsed, a request that waited too long.

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

A refusal must cost far less than serving, or an overloaded server spends its time refusing: at
twice the capacity (single reports, 2 cores) each 503 that went through gunicorn's request parser,
its WSGI environ and its response writer cost about a third of a served report, and goodput fell
to half the capacity. So the worker refuses on its own, by the bar `Shedding` keeps
(`Shedding.bar_ms`), with the response `Shedding.refusal` writes, in two places:

- at a thread, before parsing: a request whose wait is past the bar is read off the socket
  whole and answered with the 503 (`refuse`);
- at the door, before a thread: while the process is overloaded (it shed a request in the last
  second) and the oldest request waiting for a thread has waited past the short bar
  (`Shedding.door_bar_ms`), the queue stands, and a new one would wait as long: it is answered
  at once by the worker's loop, without a thread, a future or a parser. Not before the first
  shed, nor without a short bar: a queue behind one stalled request (a lock, a slow query)
  drains at once when it ends, and a newcomer would have been served in time.

Only a complete, ordinary request is refused this way (one request with its whole body, no
chunked body, nothing left over from the previous request on the connection): anything else goes
the usual way, and `Shedding` refuses it after gunicorn parsed it. A refused connection stays
open when the client asked to keep it (HTTP/1.1), so the client does not pay a new connection for
each 503. A connection whose client already hung up is closed, nothing done.

    gunicorn config.wsgi --worker-class config.server.ThreadWorker --threads 8
"""

from __future__ import annotations

import contextlib
import logging
import re
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from gunicorn.http.body import LengthReader
from gunicorn.workers.gthread import ThreadWorker as GunicornThreadWorker

logger = logging.getLogger(__name__)

QUEUED_AT = "failsight.queued_at"  # the name orchestrator.api.overload reads
# struct tcp_info (linux/tcp.h): eight u8 fields, then u32 fields; tcpi_last_data_recv is the
# twelfth u32 (after rto, ato, snd_mss, rcv_mss, unacked, sacked, lost, retrans, fackets,
# last_data_sent, last_ack_sent).
_TCP_INFO_SIZE = 104
_LAST_DATA_RECV_OFFSET = 52
# A request refused before parsing is read whole in one receive: larger ones go the usual way.
_MAX_REFUSED_REQUEST = 65536
# How often at most the worker logs how many requests it refused before parsing.
_LOG_EVERY_SECONDS = 1.0

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


def since(queued_at: float, sock: Any, now: float) -> float:
    """When the request on `sock` arrived (monotonic): the earlier of when the worker queued it
    for a thread and when the kernel last received its bytes."""
    arrived = arrived_at(sock, now)
    return queued_at if arrived is None else min(queued_at, arrived)


@dataclass(frozen=True, slots=True)
class RequestHead:
    """What a refusal needs to know of a request: its method, its path, whether the client
    keeps the connection."""

    method: str
    path: str
    keep_alive: bool


_TOKEN = re.compile(rb"[A-Z]+")
_HEADER = re.compile(rb"\r\n([^:\r\n]+):[ \t]*([^\r\n]*)")


def complete_request(data: bytes) -> RequestHead | None:
    """Return the head of `data` when it is exactly one whole HTTP/1.x request: a request line,
    headers, and a body of its Content-Length (or none). None for anything else (partial, two
    requests, a chunked or otherwise framed body, Expect, a malformed line): the request then
    goes through gunicorn's own parser."""
    end = data.find(b"\r\n\r\n")
    line_end = data.find(b"\r\n")
    if end < 0:
        return None
    parts = data[:line_end].split(b" ")
    if len(parts) != 3 or parts[2] not in (b"HTTP/1.1", b"HTTP/1.0"):
        return None
    method, target, version = parts
    if not _TOKEN.fullmatch(method) or not target.startswith(b"/"):
        return None
    length, keep_alive = None, version == b"HTTP/1.1"
    for name, value in _HEADER.findall(data, line_end, end + 2):
        if name != name.strip():
            return None  # a folded or malformed header line: gunicorn's parser refuses it
        name = name.lower()
        if name == b"content-length":
            if length is not None or not value.strip().isdigit():
                return None
            length = int(value)
        elif name in (b"transfer-encoding", b"expect"):
            return None
        elif name == b"connection":
            tokens = {token.strip().lower() for token in value.split(b",")}
            keep_alive = keep_alive and b"close" not in tokens
    if len(data) != end + 4 + (length or 0):
        return None
    path = target.split(b"?", 1)[0].decode("latin-1")
    return RequestHead(method.decode("ascii"), path, keep_alive)


def nothing_buffered(parser: Any) -> bool:
    """Whether gunicorn's parser of a connection holds nothing of a request yet: no bytes read
    ahead, and the previous request's body (if any) read to its end. Only then is what the
    socket holds next the start of a request."""
    if parser is None:
        return True
    unreader = parser.unreader.buf
    unreader.seek(0, 2)
    if unreader.tell():
        return False
    previous = parser.mesg
    if previous is None:
        return True
    body = previous.body
    reader = getattr(body, "reader", None)
    return isinstance(reader, LengthReader) and reader.length == 0 and not body.buf.tell()


class ThreadWorker(GunicornThreadWorker):
    def init_process(self) -> None:
        # Connections queued for a thread, oldest first (the pool takes them in this order).
        self._waiting: deque[Any] = deque()
        self.shedding: Any = None
        self._refused = {"door": 0, "thread": 0}
        self._logged_at = time.monotonic()
        super().init_process()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        from orchestrator.api.overload import Shedding  # the app (and Django) are loaded now

        if isinstance(self.wsgi, Shedding):
            self.shedding = self.wsgi
        self.wsgi = _with_queue_time(self.wsgi)

    def enqueue_req(self, conn: Any) -> None:
        now = time.monotonic()
        conn.queued_at = now
        if self._waiting and self.shedding is not None:
            head_waited = (now - self._waiting[0].queued_at) * 1000
            bar = self.shedding.door_bar_ms(now)
            if bar and head_waited > bar:
                reason = f"the requests ahead of this one have waited {head_waited:.0f} ms"
                outcome = self.refuse(conn, reason, now, "door")
                if outcome is not None:
                    self._back_to_loop(*outcome)
                    return
        self._waiting.append(conn)
        super().enqueue_req(conn)

    def handle(self, conn: Any) -> Any:
        with contextlib.suppress(IndexError):
            self._waiting.popleft()
        now = time.monotonic()
        queued_at = getattr(conn, "queued_at", None)
        if queued_at is not None:
            queued_at = since(queued_at, conn.sock, now)
            waited = (now - queued_at) * 1000
            bar = self.shedding.bar_ms(now) if self.shedding is not None else 0
            if bar and waited > bar:
                reason = f"this request waited {waited:.0f} ms"
                outcome = self.refuse(conn, reason, now, "thread")
                if outcome is not None:
                    return outcome
        _handling.queued_at = queued_at
        return super().handle(conn)

    def refuse(self, conn: Any, reason: str, now: float, where: str) -> tuple[bool, Any] | None:
        """Answer the request on `conn` with the shedding 503 without parsing it; return
        (keep the connection, conn) as `handle` does, or None when it must go the usual way
        (anything read is put back for gunicorn's parser)."""
        if self.cfg.is_ssl or not nothing_buffered(conn.parser):
            return None  # TLS: the bytes on the socket are not the request's
        try:
            data = conn.sock.recv(_MAX_REFUSED_REQUEST, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None  # nothing there yet: the usual way waits for it
        except OSError:
            return False, conn  # reset: the client is gone
        if not data:
            return False, conn  # the client hung up: nothing to do
        head = complete_request(data)
        if head is None:
            conn.init()  # makes the parser if this connection had none yet
            conn.parser.unreader.unread(data)
            return None
        keep = (
            head.keep_alive
            and self.alive
            and bool(self.cfg.keepalive)
            and len(self._keep) < self.max_keepalived
        )
        answer = self.shedding.refusal(head.method, head.path, reason, keep_alive=keep)
        self.shedding.note_shed(now)
        self._note_refusal(where, now)
        try:
            sent = conn.sock.send(answer, socket.MSG_DONTWAIT)
        except OSError:
            return False, conn
        return sent == len(answer) and keep, conn

    def _back_to_loop(self, keep: bool, conn: Any) -> None:
        """What gunicorn's `finish_request` does with a handled connection, for one refused by
        the loop itself: back to waiting for its next request, or closed."""
        if not keep:
            self.nr_conns -= 1
            conn.close()
            return
        if not conn.initialized:
            conn.init()  # a keep-alive connection has its parser (gthread's loop relies on it)
        conn.sock.setblocking(False)
        conn.set_timeout()
        with self._lock:
            self._keep.append(conn)
            self.poller.register(
                conn.sock, selectors.EVENT_READ, partial(self.on_client_socket_readable, conn)
            )

    def _note_refusal(self, where: str, now: float) -> None:
        """Count it; say how many were refused, at most once a second while it goes on."""
        self._refused[where] += 1
        if now - self._logged_at >= _LOG_EVERY_SECONDS:
            door, thread = self._refused["door"], self._refused["thread"]
            logger.warning(
                "overloaded: refused %d requests before parsing in %.1f s "
                "(%d at the door, %d waiting for a thread)",
                door + thread,
                now - self._logged_at,
                door,
                thread,
            )
            self._refused = {"door": 0, "thread": 0}
            self._logged_at = now


def _with_queue_time(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        queued_at = getattr(_handling, "queued_at", None)
        if queued_at is not None:
            environ[QUEUED_AT] = queued_at
        return app(environ, start_response)

    return wrapped
