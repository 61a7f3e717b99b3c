"""Failures while a connection is set up: WebSocket handshakes refused (websockets), database
drivers' connect timeouts (psycopg, PyMySQL, asyncpg, redis), FTP permission replies (a real
pyftpdlib server) and TLS servers that demand a client certificate (TLS 1.2 and 1.3, through
Python's ssl and through libpq)."""

from __future__ import annotations

import asyncio
import io
import socket
import ssl
from collections.abc import Callable

from tests.classifier.corpus.cases import TIMEOUT_S, Call, Case, Prepare, T, calling
from tests.classifier.corpus.databases import redis_client
from tests.classifier.faults import TLS12, FaultEnv
from tests.classifier.handshake_faults import FTP_PASSWORD, FTP_READER

# --- WebSocket handshakes (websockets) ---


def _websocket(path: str, client: str = "sync") -> Prepare:
    def make(env: FaultEnv) -> Call:
        url = env.websocket() + path
        if client == "asyncio":
            from websockets.asyncio.client import connect as connect_async

            async def call() -> None:
                async with connect_async(url, open_timeout=2):
                    pass

            return lambda: asyncio.run(call())
        from websockets.sync.client import connect

        return lambda: connect(url, open_timeout=2).close()

    return calling(make)


def _websocket_to(url_of: Callable[[FaultEnv], str]) -> Prepare:
    def make(env: FaultEnv) -> Call:
        from websockets.sync.client import connect

        url = url_of(env)
        return lambda: connect(url, open_timeout=1).close()

    return calling(make)


WEBSOCKETS = [
    Case(
        "websockets: a handshake refused with 401 (InvalidStatus) is auth_failure",
        _websocket("/401"),
        T.AUTH_FAILURE,
        {"status_code": 401, "exception_type": "websockets.exceptions.InvalidStatus"},
        why="InvalidStatus keeps the handshake's response: its status decides",
    ),
    Case(
        "websockets: a handshake refused with 403 is auth_failure",
        _websocket("/403", client="asyncio"),
        T.AUTH_FAILURE,
        {"status_code": 403, "retryable": False},
    ),
    Case(
        "websockets: a handshake refused with 429 is rate_limited, with its Retry-After",
        _websocket("/429"),
        T.RATE_LIMITED,
        {"status_code": 429, "retry_after": 7.0},
    ),
    Case(
        "websockets: a handshake refused with 503 is server_fault, its body's retry_after read",
        _websocket("/503", client="asyncio"),
        T.SERVER_FAULT,
        {"status_code": 503, "retry_after": 12.0},
        why="no Retry-After header: the JSON body the response kept says 12 s",
    ),
    Case(
        "websockets: a plain HTTP page (200, no upgrade) is invalid_input, not unclassified",
        _websocket("/200"),
        T.INVALID_INPUT,
        {"retryable": False},
        why="the URL names no WebSocket endpoint: every retry is answered the same",
    ),
    Case(
        "websockets: a handshake answer cut short is transient",
        _websocket_to(lambda env: f"ws://127.0.0.1:{env.cut_short()}/"),
        T.TRANSIENT,
        {"exception_type": "websockets.exceptions.InvalidMessage"},
        why="a server that hangs up in the middle of its 101 answer: the next connection may be "
        "served",
    ),
    Case(
        "websockets: an http:// URL (InvalidURI) is invalid_input",
        _websocket_to(lambda env: env.url),
        T.INVALID_INPUT,
    ),
]


# --- database drivers' connect timeouts ---
#
# Two ways a connect times out: the server's address never answers (the blackhole port: its
# accept queue is full, so SYNs are dropped) or a server accepts and never speaks (the silent port).


def _psycopg_connect(port_of: Callable[[FaultEnv], int]) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import psycopg

        port = port_of(env)
        return lambda: psycopg.connect(
            host="127.0.0.1", port=port, user="x", dbname="x", connect_timeout=1
        )

    return calling(make)


def _pymysql_connect(port_of: Callable[[FaultEnv], int]) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import pymysql

        port = port_of(env)
        return lambda: pymysql.connect(
            host="127.0.0.1", port=port, connect_timeout=TIMEOUT_S, read_timeout=TIMEOUT_S
        )

    return calling(make)


def _asyncpg_connect(port_of: Callable[[FaultEnv], int]) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import asyncpg

        port = port_of(env)

        async def call() -> None:
            connection = await asyncpg.connect(
                host="127.0.0.1", port=port, user="x", database="x", timeout=TIMEOUT_S
            )
            await connection.close()

        return lambda: asyncio.run(call())

    return calling(make)


def _blackhole(env: FaultEnv) -> int:
    return env.blackhole()


def _silent(env: FaultEnv) -> int:
    return env.silent


CONNECT_TIMEOUTS = [
    Case(
        "psycopg: a connect to an address that never answers is a timeout",
        _psycopg_connect(_blackhole),
        T.TIMEOUT,
        {"exception_type": "psycopg.errors.ConnectionTimeout"},
    ),
    Case(
        "psycopg: a server that accepts and never speaks is a timeout",
        _psycopg_connect(_silent),
        T.TIMEOUT,
    ),
    Case(
        "PyMySQL: a connect that times out (2003 '(timed out)') is a timeout, not transient",
        _pymysql_connect(_blackhole),
        T.TIMEOUT,
        {"provider_code": "2003", "retryable": True},
        why="2003 says only that the connection failed; its text says by a timeout",
    ),
    Case(
        "PyMySQL: a server silent at the greeting (2013 '(timed out)') is a timeout",
        _pymysql_connect(_silent),
        T.TIMEOUT,
        {"provider_code": "2013"},
        why="CR_SERVER_LOST, lost by the read timeout",
    ),
    Case(
        "asyncpg: a connect to an address that never answers is a timeout",
        _asyncpg_connect(_blackhole),
        T.TIMEOUT,
    ),
    Case(
        "asyncpg: a server that accepts and never speaks is a timeout",
        _asyncpg_connect(_silent),
        T.TIMEOUT,
    ),
    Case(
        "redis: a connect to an address that never answers is a timeout",
        redis_client(_blackhole),
        T.TIMEOUT,
        {"exception_type": "redis.exceptions.TimeoutError"},
    ),
]


# --- FTP permission replies (pyftpdlib) ---


def _ftp(action: Callable[[object], object], password: str = FTP_PASSWORD) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import ftplib

        port = env.ftp()

        def call() -> None:
            with ftplib.FTP(timeout=2) as ftp:
                ftp.connect("127.0.0.1", port)
                ftp.login(FTP_READER, password)
                action(ftp)

        return call

    return calling(make)


FTP_PERMISSIONS = [
    Case(
        "pyftpdlib: a refused write (550 Not enough privileges) is auth_failure, not missing",
        _ftp(lambda ftp: ftp.storbinary("STOR report.csv", io.BytesIO(b"a,b\n"))),
        T.AUTH_FAILURE,
        {"provider_code": "550", "retryable": False, "exception_type": "ftplib.error_perm"},
        why="550 covers a missing file and a refused permission; the reply's text tells which",
    ),
    Case(
        "pyftpdlib: a refused MKD (550) is auth_failure",
        _ftp(lambda ftp: ftp.mkd("reports/2031")),
        T.AUTH_FAILURE,
        {"provider_code": "550"},
    ),
    Case(
        "pyftpdlib: a file that does not exist (550 No such file) stays resource_missing",
        _ftp(lambda ftp: ftp.retrbinary("RETR missing.csv", lambda block: None)),
        T.RESOURCE_MISSING,
        {"provider_code": "550"},
    ),
    Case(
        "pyftpdlib: a wrong password (530) is auth_failure",
        _ftp(lambda ftp: None, password="wrong-password"),
        T.AUTH_FAILURE,
        {"provider_code": "530", "retryable": False},
    ),
]


# --- TLS servers demanding a client certificate ---


def _tls_raw(kind: str) -> Prepare:
    """Python's ssl on a bare socket: a request sent, the answer read."""

    def make(env: FaultEnv) -> Call:
        port = int(env.tls(kind).rsplit(":", 1)[1])
        context = ssl.create_default_context(cafile=str(env.certificates().good[0]))

        def call() -> None:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=2) as sock,
                context.wrap_socket(sock, server_hostname="127.0.0.1") as secure,
            ):
                secure.sendall(b"GET /s/status-200 HTTP/1.0\r\n\r\n")
                secure.recv(100)

        return call

    return calling(make)


def _httpx_tls12(env: FaultEnv) -> Call:
    import httpx

    url = env.tls("client-cert-tls12") + "/s/status-200"
    context = ssl.create_default_context(cafile=str(env.certificates().good[0]))
    return lambda: httpx.get(url, verify=context, timeout=2)


def _psycopg_tls(version: ssl.TLSVersion) -> Prepare:
    """libpq's TLS: it quotes OpenSSL's alert in its own message (the driver keeps only text)."""

    def make(env: FaultEnv) -> Call:
        import psycopg

        port, ca = env.postgres_tls(version), str(env.certificates().good[0])
        return lambda: psycopg.connect(
            host="127.0.0.1",
            port=port,
            user="x",
            dbname="x",
            sslmode="verify-ca",
            sslrootcert=ca,
            connect_timeout=2,
        )

    return calling(make)


def _asyncpg_tls(env: FaultEnv) -> Call:
    import asyncpg

    port = env.postgres_tls(TLS12)
    context = ssl.create_default_context(cafile=str(env.certificates().good[0]))

    async def call() -> None:
        connection = await asyncpg.connect(
            host="127.0.0.1", port=port, user="x", database="x", ssl=context, timeout=2
        )
        await connection.close()

    return lambda: asyncio.run(call())


TLS_HANDSHAKE_FAILURE = {"provider_code": "SSLV3_ALERT_HANDSHAKE_FAILURE", "retryable": False}

TLS_CLIENT_CERTS = [
    Case(
        "ssl: TLS 1.2 refusing a client without a certificate (handshake failure) is auth_failure",
        _tls_raw("client-cert-tls12"),
        T.AUTH_FAILURE,
        TLS_HANDSHAKE_FAILURE,
        why="in TLS 1.2 the server's only word for 'no certificate' is the handshake_failure alert",
    ),
    Case(
        "ssl: TLS 1.3 asking for a client certificate (certificate_required) is auth_failure",
        _tls_raw("client-cert"),
        T.AUTH_FAILURE,
        {"provider_code": "TLSV13_ALERT_CERTIFICATE_REQUIRED", "retryable": False},
        why="the alert arrives on the first read, after a handshake that looked complete",
    ),
    Case(
        "httpx: TLS 1.2 refusing a client without a certificate is auth_failure",
        calling(_httpx_tls12),
        T.AUTH_FAILURE,
        TLS_HANDSHAKE_FAILURE,
        why="ConnectError says transient; the ssl error it wraps says the certificate is missing",
    ),
    Case(
        "psycopg: libpq's 'SSL error: ssl/tls alert handshake failure' is auth_failure",
        _psycopg_tls(TLS12),
        T.AUTH_FAILURE,
        {"retryable": False, "signal": "message"},
        why="libpq keeps only OpenSSL's alert text, read before the broad OperationalError",
    ),
    Case(
        "psycopg: libpq's 'SSL error: tlsv13 alert certificate required' is auth_failure",
        _psycopg_tls(ssl.TLSVersion.TLSv1_3),
        T.AUTH_FAILURE,
        {"retryable": False},
    ),
    Case(
        "asyncpg: TLS 1.2 refusing a client without a certificate is auth_failure",
        calling(_asyncpg_tls),
        T.AUTH_FAILURE,
        TLS_HANDSHAKE_FAILURE,
    ),
]
