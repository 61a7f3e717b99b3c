"""The web server's worker: gunicorn's threaded worker, telling the app how long a request waited,
refusing before it is parsed a request that waited too long, and serving single run reports
without gunicorn's request parser.

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
(`Shedding.bar_ms`), with the 503 `Shedding` answers (`shed`), in two places:

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

Single reports (`POST /api/v1/runs`, most of the API's traffic) are served the same way: a plain
report read whole off the socket gets the environ gunicorn would build for it
(`report_environ`), is answered by `FastReports.serve` (the same code that answers it behind
gunicorn's parser), and its answer is written with one send and logged in the access log as
gunicorn logs a request. gunicorn's pure-Python parser, environ builder and response writer had
been about a quarter of a served report's interpreter time (py-spy at 600 reports/s). Anything
else (a header gunicorn reads for itself such as a forwarded scheme, an underscore in a header
name, a repeated header, a report the fast path hands to Django) is put back and goes the usual
way; a report the fast path declined goes straight to Django then, not through the fast path a
second time. TLS, the PROXY protocol and a SCRIPT_NAME turn this off, and so does
INGEST_FAST_PATH = False.

    gunicorn config.wsgi --worker-class config.server.ThreadWorker --threads 8
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from email.utils import formatdate
from functools import cache, lru_cache, partial
from typing import Any

from gunicorn.http.body import LengthReader
from gunicorn.http.wsgi import base_environ
from gunicorn.util import unquote_to_wsgi_str
from gunicorn.workers.gthread import ThreadWorker as GunicornThreadWorker

logger = logging.getLogger(__name__)

QUEUED_AT = "failsight.queued_at"  # the name orchestrator.api.overload reads
# Set on the environ of a report the fast path declined when read here: Django answers it.
HANDED_OVER = "failsight.handed_over"
# struct tcp_info (linux/tcp.h): eight u8 fields, then u32 fields; tcpi_last_data_recv is the
# twelfth u32 (after rto, ato, snd_mss, rcv_mss, unacked, sacked, lost, retrans, fackets,
# last_data_sent, last_ack_sent).
_TCP_INFO_SIZE = 104
_LAST_DATA_RECV_OFFSET = 52
# A request refused or served before parsing is read whole in one receive: larger ones go the
# usual way.
_MAX_REQUEST = 65536
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
    """A whole request read off its socket: its method, its path, whether the client keeps the
    connection, and (for serving it) its target, version, headers and where the body starts."""

    method: str
    path: str
    keep_alive: bool
    target: bytes = b""
    version: bytes = b""
    headers: tuple[tuple[bytes, bytes], ...] = ()
    body_at: int = 0


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
    headers = _HEADER.findall(data, line_end, end + 2)
    for name, value in headers:
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
    return RequestHead(
        method.decode("ascii"), path, keep_alive, target, version, tuple(headers), end + 4
    )


_HEADER_NAME = re.compile(rb"[!#$%&'*+.^`|~0-9A-Za-z-]+")
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


def report_environ(
    data: bytes, head: RequestHead, conn: Any, cfg: Any, base: dict[str, Any]
) -> dict[str, Any] | None:
    """The WSGI environ gunicorn would build for this plain request (as `gunicorn.http.wsgi`
    does, for the simple case only), or None when it is not that simple: a header gunicorn
    treats itself (forwarded scheme, SCRIPT_NAME), a name with an underscore (gunicorn drops
    those, ambiguous with a hyphen), a repeated header, a control character, no Host, or
    anything over gunicorn's request limits. Such a request goes through gunicorn's parser."""
    if len(head.target) + len(head.method) + 10 > cfg.limit_request_line:
        return None
    if len(head.headers) > cfg.limit_request_fields or b"#" in head.target:
        return None
    if not (isinstance(conn.client, tuple) and isinstance(conn.server, tuple)):
        return None  # a Unix socket: gunicorn makes up the addresses its own way
    own = server_headers(cfg)
    environ = base | {
        "wsgi.input": io.BytesIO(data[head.body_at :]),
        "gunicorn.socket": conn.sock,
        "REQUEST_METHOD": head.method,
        "QUERY_STRING": head.target.partition(b"?")[2].decode("latin-1"),
        "RAW_URI": head.target.decode("latin-1"),
        "SERVER_PROTOCOL": head.version.decode("ascii"),
        "wsgi.url_scheme": "http",
        "REMOTE_ADDR": conn.client[0],
        "REMOTE_PORT": str(conn.client[1]),
        "SERVER_NAME": conn.server[0],
        "SERVER_PORT": str(conn.server[1]),
        "PATH_INFO": unquote_to_wsgi_str(head.path),
        "SCRIPT_NAME": "",
    }
    for raw_name, raw_value in head.headers:
        name = raw_name.lower()
        if (
            not _HEADER_NAME.fullmatch(raw_name)
            or b"_" in raw_name
            or name in own
            or _CONTROL.search(raw_value)
            or len(raw_name) + len(raw_value) + 2 > cfg.limit_request_field_size
        ):
            return None
        value = raw_value.strip(b" \t").decode("latin-1")
        if name == b"content-type":
            key = "CONTENT_TYPE"
        elif name == b"content-length":
            key = "CONTENT_LENGTH"
        else:
            key = "HTTP_" + name.decode("ascii").upper().replace("-", "_")
        if key in environ:
            return None
        environ[key] = value
    return environ if "HTTP_HOST" in environ else None


@cache
def _server_headers(scheme_headers: frozenset[str], forwarders: frozenset[str]) -> frozenset:
    return frozenset(n.lower().encode("latin-1") for n in scheme_headers | forwarders) | {
        b"forwarded"
    }


def server_headers(cfg: Any) -> frozenset[bytes]:
    """The header names (lower case) gunicorn reads for itself under `cfg`: the scheme and the
    path a proxy forwards (secure_scheme_headers, forwarder_headers, Forwarded). A request that
    carries one goes through gunicorn's parser, which applies forwarded_allow_ips to them."""
    return _server_headers(frozenset(cfg.secure_scheme_headers), frozenset(cfg.forwarder_headers))


def _read_ahead(parser: Any) -> bool:
    """Whether gunicorn's parser holds bytes it read past the request it parsed last."""
    buffer = parser.unreader.buf
    buffer.seek(0, 2)
    return buffer.tell() > 0


def nothing_buffered(parser: Any) -> bool:
    """Whether gunicorn's parser of a connection holds nothing of a request yet: no bytes read
    ahead, and the previous request's body (if any) read to its end. Only then is what the
    socket holds next the start of a request."""
    if parser is None:
        return True
    if _read_ahead(parser):
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
        self.reports: Any = None  # FastReports, when single reports are served here
        self.report_path = ""
        self.init_counts()
        super().init_process()

    def init_counts(self) -> None:
        """No refusal counted or logged yet."""
        self._refused = {"door": 0, "thread": 0}  # refusals not logged yet
        self._refusals_lock = threading.Lock()  # refused by threads and by the loop
        self._logged_at = time.monotonic() - _LOG_EVERY_SECONDS  # the first is logged at once

    def load_wsgi(self) -> None:
        super().load_wsgi()
        # The app (and Django) are loaded now.
        from orchestrator.api import fastpath, overload

        self.app_parts = fastpath, overload
        if isinstance(self.wsgi, overload.Shedding):
            self.shedding = self.wsgi
            if isinstance(self.wsgi.app, fastpath.FastReports) and self._can_serve_reports():
                self.reports, self.report_path = self.wsgi.app, fastpath.REPORT_PATH
        self.wsgi = _with_queue_time(self.wsgi)
        self.base_environ = base_environ(self.cfg) | {"wsgi.multithread": True}

    def _can_serve_reports(self) -> bool:
        """Whether single reports may be read and answered here: not over TLS or the PROXY
        protocol, and with no SCRIPT_NAME (gunicorn's parser handles those)."""
        return not (self.cfg.is_ssl or self.cfg.proxy_protocol or os.environ.get("SCRIPT_NAME"))

    def enqueue_req(self, conn: Any) -> None:
        now = time.monotonic()
        conn.queued_at = now
        if self._waiting and self.shedding is not None:
            head_waited = (now - self._waiting[0].queued_at) * 1000
            bar = self.shedding.door_bar_ms(now)
            if bar and head_waited > bar:
                reason = f"the requests ahead of this one have waited {head_waited:.0f} ms"
                try:
                    outcome = self.refuse(conn, reason, now, "door")
                except Exception:  # the worker's loop itself must go on
                    logger.exception("Error refusing a request at the door")
                    outcome = False, conn
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
        try:
            outcome = self.before_parsing(conn, queued_at, now)
        except Exception:  # what gunicorn's handle does with an error of the app's
            logger.exception("Error handling a request before parsing it")
            return False, conn
        if outcome is not None:
            return outcome
        _handling.queued_at = queued_at
        outcome = super().handle(conn)
        # A pipelined request already read off the socket would wait in the parser for the
        # socket to become readable again, which it never does: gunicorn's threaded worker
        # closed such a connection at the keep-alive timeout, the request unanswered.
        while outcome[0] and _read_ahead(conn.parser):
            _handling.queued_at = None
            outcome = super().handle(conn)
        return outcome

    def before_parsing(
        self, conn: Any, queued_at: float | None, now: float
    ) -> tuple[bool, Any] | None:
        """Refuse the request if it waited past the bar, or serve it if it is a plain single
        report; None: neither, gunicorn's parser reads it."""
        if queued_at is not None and self.shedding is not None:
            waited = (now - queued_at) * 1000
            bar = self.shedding.bar_ms(now)
            if bar and waited > bar:
                outcome = self.refuse(conn, f"this request waited {waited:.0f} ms", now, "thread")
                if outcome is not None:
                    return outcome
        return self.serve_report(conn) if self.reports is not None else None

    def serve_report(self, conn: Any) -> tuple[bool, Any] | None:
        """Serve an ordinary single report (`FastReports`) read whole off the socket, without
        gunicorn's parser, environ builder and response writer; return (keep the connection,
        conn) as `handle` does, or None for any other request (put back for gunicorn's parser,
        and marked to go straight to Django when the fast path declined it)."""
        if not self.reports.enabled():
            return None
        data = self._receive(conn)
        if not data:
            return None if data is None else (False, conn)
        head = complete_request(data)
        environ = None
        if head is not None and head.method == "POST" and head.path == self.report_path:
            environ = report_environ(data, head, conn, self.cfg, self.base_environ)
        if environ is None:
            _put_back(conn, data)
            return None
        started = datetime.now()
        fastpath, overload = self.app_parts
        if overload.client_gone(environ):
            logger.info("POST %s: the client left before it was served", self.report_path)
            return False, conn
        try:
            status, headers, body = self.reports.serve(environ)
        except fastpath.Handover:
            _put_back(conn, data)
            _handling.handed_over = True
            return None
        keep = self._keeps(head)
        try:
            conn.sock.sendall(http_response(status, headers, body, keep_alive=keep))
        except OSError:  # the client left meanwhile: as gunicorn, nothing more to do
            return False, conn
        sent = _Sent(status, len(body), headers)
        self.log.access(sent, head_headers(head), environ, datetime.now() - started)
        return keep, conn

    def _keeps(self, head: RequestHead) -> bool:
        """Whether the connection stays open after answering `head`, as gunicorn's
        `handle_request` decides (the client's wish, keep-alive on, room for one more, and the
        worker not restarting after max_requests)."""
        self.nr += 1
        if self.nr >= self.max_requests and self.alive:
            self.log.info("Autorestarting worker after current request.")
            self.alive = False
        return (
            head.keep_alive
            and self.alive
            and bool(self.cfg.keepalive)
            and len(self._keep) < self.max_keepalived
        )

    def _receive(self, conn: Any) -> bytes | None:
        """What the connection's socket holds, read at once: b"" when its client is gone (hung
        up or reset), None when nothing has come yet, over TLS, or when gunicorn's parser
        holds part of a request already (then it is gunicorn's to read)."""
        if self.cfg.is_ssl or not nothing_buffered(conn.parser):
            return None
        try:
            return conn.sock.recv(_MAX_REQUEST, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None
        except OSError:
            return b""

    def refuse(self, conn: Any, reason: str, now: float, where: str) -> tuple[bool, Any] | None:
        """Answer the request on `conn` with the shedding 503 without parsing it; return
        (keep the connection, conn) as `handle` does, or None when it must go the usual way
        (anything read is put back for gunicorn's parser)."""
        data = self._receive(conn)
        if not data:
            return None if data is None else (False, conn)  # gone: nothing to do
        head = complete_request(data)
        if head is None:
            _put_back(conn, data)
            return None
        keep = self._keeps(head)
        environ = {"REQUEST_METHOD": head.method, "PATH_INFO": head.path}
        status, headers, body = self.app_parts[1].shed(environ, reason)
        headers["Content-Length"] = str(len(body))
        answer = http_response(status, headers.items(), body, keep_alive=keep)
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
        """Count it, and say so (`_say_refusals`)."""
        with self._refusals_lock:
            self._refused[where] += 1
        self._say_refusals(now)

    def notify(self) -> None:
        """The loop's heartbeat, every turn (at least once a second): also says the refusals
        counted since the last line, so that the end of an overload is logged within about a
        second, not only at the next refusal (which may never come)."""
        super().notify()
        self._say_refusals(time.monotonic())

    def _say_refusals(self, now: float) -> None:
        """Log how many requests were refused before parsing since the last such line, at most
        once a second. The first refusal after a quiet second is logged at once."""
        if now - self._logged_at < _LOG_EVERY_SECONDS:
            return
        with self._refusals_lock:  # checked again: another thread may have just said them
            door, thread = self._refused["door"], self._refused["thread"]
            if not door + thread or now - self._logged_at < _LOG_EVERY_SECONDS:
                return
            self._refused = {"door": 0, "thread": 0}
            since, self._logged_at = self._logged_at, now
        logger.info(  # shedding is the design under overload, not a fault
            "overloaded: refused %d requests before parsing in %.1f s "
            "(%d at the door, %d waiting for a thread)",
            door + thread,
            now - since,
            door,
            thread,
        )


@dataclass(slots=True)
class _Sent:
    """A served report's answer as gunicorn's access log reads a response."""

    status: str
    sent: int
    headers: list[tuple[str, str]]


def head_headers(head: RequestHead) -> list[tuple[str, str]]:
    """The request's headers as gunicorn's access log reads them (upper-cased names)."""
    return [(n.decode("latin-1").upper(), v.decode("latin-1")) for n, v in head.headers]


_CONNECTION = {True: "Connection: keep-alive", False: "Connection: close"}


def http_response(
    status: str, headers: Iterable[tuple[str, str]], body: bytes, *, keep_alive: bool
) -> bytes:
    """A whole HTTP/1.1 response, status line to body, as the worker writes it itself (a served
    report, a refusal): the headers given (Content-Length among them), Date and Connection."""
    lines = [f"HTTP/1.1 {status}", *(f"{name}: {value}" for name, value in headers)]
    lines += [f"Date: {_http_date(int(time.time()))}", _CONNECTION[keep_alive]]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@lru_cache(maxsize=1)
def _http_date(second: int) -> str:
    """An HTTP Date header's value, formatted once a second."""
    return formatdate(second, usegmt=True)


def _put_back(conn: Any, data: bytes) -> None:
    """Give bytes read off a connection back to gunicorn's parser, which reads them first."""
    conn.init()  # makes the parser if this connection had none yet
    conn.parser.unreader.unread(data)


def _with_queue_time(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if getattr(_handling, "handed_over", False):
            # Admitted once already (its wait was judged then): not shed for the time it spent
            # in the fast path since.
            _handling.handed_over = False
            environ[HANDED_OVER] = True
        else:
            queued_at = getattr(_handling, "queued_at", None)
            if queued_at is not None:
                environ[QUEUED_AT] = queued_at
        return app(environ, start_response)

    return wrapped
