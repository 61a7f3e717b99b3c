"""Fault servers for failures that happen while a connection is being set up, on 127.0.0.1: a
port whose accept queue is full (a connect that never completes, as a blackholed address), a
PostgreSQL-speaking server that accepts TLS and then demands a client certificate, a real FTP
server (pyftpdlib) with a read-only user, and a real WebSocket server (websockets) that refuses
the handshake with a chosen HTTP status.

Each is a context manager that yields where it listens and stops what it started; `faults.FaultEnv`
starts them on first use.
"""

from __future__ import annotations

import contextlib
import http
import logging
import socket
import ssl
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.classifier.protocol_faults import CLIENT_WAIT_S, POLL_S, server_context

# --- a connect that never completes ---------------------------------------------------------------


@contextmanager
def blackhole_port() -> Iterator[int]:
    """Yield a port whose accept queue is full: the kernel drops further SYNs, so a client's
    connect waits for its own timeout, as against an address that never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    try:
        # One connection fills a backlog of 0; a second makes sure (it may time out itself).
        for _ in range(2):
            filler = socket.socket()
            filler.settimeout(0.5)
            with contextlib.suppress(OSError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


# --- PostgreSQL's SSLRequest, then a handshake demanding a client certificate ---------------------

SSL_REQUEST = b"\x00\x00\x00\x08\x04\xd2\x16\x2f"


@contextmanager
def postgres_tls_server(
    cert: tuple[Path, Path], client_ca: Path, maximum_version: ssl.TLSVersion
) -> Iterator[int]:
    """Yield the port of a server that answers PostgreSQL's SSLRequest with "S" and then demands
    a client certificate issued by `client_ca` (libpq and asyncpg negotiate TLS this way)."""
    context = server_context(cert, client_ca, maximum_version)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(POLL_S)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=_refuse_without_certificate, args=(client, context)).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        listener.close()


def _refuse_without_certificate(client: socket.socket, context: ssl.SSLContext) -> None:
    with client:
        client.settimeout(CLIENT_WAIT_S)
        try:
            if client.recv(8) != SSL_REQUEST:
                return
            client.sendall(b"S")
            secure = context.wrap_socket(client, server_side=True)
        except (ssl.SSLError, OSError):
            _drain(client)  # the alert is on its way: let the client read it before the close
            return
        secure.close()


def _drain(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(4096):
            pass


# --- FTP: pyftpdlib with a read-only user -------------------------------------------------------

FTP_READER, FTP_PASSWORD = "reader", "reader-password"


@contextmanager
def ftp_server() -> Iterator[int]:
    """Yield the port of a real FTP server whose user `reader` may list and read (a `reports`
    folder exists) but not write; a failed login is answered at once."""
    from pyftpdlib.authorizers import DummyAuthorizer
    from pyftpdlib.handlers import FTPHandler
    from pyftpdlib.servers import ThreadedFTPServer

    logging.getLogger("pyftpdlib").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix="failsight-ftp-") as root:
        (Path(root) / "reports").mkdir()
        authorizer = DummyAuthorizer()
        authorizer.add_user(FTP_READER, FTP_PASSWORD, root, perm="elr")
        handler = type(
            "Handler",
            (FTPHandler,),
            {"authorizer": authorizer, "auth_failed_timeout": 0, "timeout": CLIENT_WAIT_S},
        )
        server = ThreadedFTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"timeout": POLL_S}, daemon=True
        )
        thread.start()
        try:
            yield server.address[1]
        finally:
            server.close_all()
            thread.join(5)


# --- WebSocket: a real websockets server refusing the handshake ----------------------------------

# path -> (status, headers, body) of the answer to the opening handshake
WEBSOCKET_REFUSALS: dict[str, tuple[int, list[tuple[str, str]], bytes]] = {
    "/401": (401, [("WWW-Authenticate", 'Bearer realm="ws"')], b"token expired"),
    "/403": (403, [], b"forbidden"),
    "/429": (429, [("Retry-After", "7")], b"slow down"),
    "/503": (503, [("Content-Type", "application/json")], b'{"retry_after": 12}'),
    "/200": (200, [("Content-Type", "text/html")], b"<html>not a WebSocket endpoint</html>"),
}


@contextmanager
def websocket_server() -> Iterator[str]:
    """Yield the ws:// base URL of a websockets server answering each WEBSOCKET_REFUSALS path
    with its status instead of 101 Switching Protocols."""
    from websockets.datastructures import Headers
    from websockets.http11 import Response
    from websockets.sync.server import serve

    def refuse(connection: object, request: object) -> Response | None:
        status, headers, body = WEBSOCKET_REFUSALS.get(getattr(request, "path", ""), (404, [], b""))
        headers = [*headers, ("Content-Length", str(len(body)))]
        return Response(status, http.HTTPStatus(status).phrase, Headers(headers), body)

    with serve(lambda connection: None, "127.0.0.1", 0, process_request=refuse) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"ws://127.0.0.1:{server.socket.getsockname()[1]}"
        finally:
            server.shutdown()
            thread.join(5)
