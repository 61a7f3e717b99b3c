"""TLS: certificates that fail verification, behind every HTTP client."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from contextlib import contextmanager

from tests.classifier.corpus.apis import boto3_session
from tests.classifier.corpus.cases import (
    TIMEOUT_S,
    Call,
    Case,
    Prepare,
    T,
    calling,
)
from tests.classifier.corpus.http_clients import closing_urlopen
from tests.classifier.faults import FaultEnv

# --- TLS: certificates that fail verification, behind every HTTP client -------------------------
#
# A certificate that fails verification fails the same way on every retry: auth_failure, never
# the transient its client's connection error says. The inner ssl error's reason decides.

TLS_VERIFY = {"provider_code": "CERTIFICATE_VERIFY_FAILED", "retryable": False}
TLS_CLIENT_CERT = {"provider_code": "TLSV13_ALERT_CERTIFICATE_REQUIRED", "retryable": False}


def _trust(env: FaultEnv, kind: str) -> str | None:
    """Return the CA file a client trusts for a TLS scenario (None: the system's CAs only)."""
    certs = env.certificates()
    return {"untrusted": None, "other-host": str(certs.other[0])}.get(kind, str(certs.good[0]))


def _tls_url(env: FaultEnv, kind: str) -> str:
    if kind == "plain-port":  # https:// to the plain HTTP fault server
        return env.url.replace("http://", "https://") + "/s/status-200"
    return env.tls(kind) + "/s/status-200"


def _tls_context(env: FaultEnv, kind: str) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=_trust(env, kind))


def _httpx_tls(kind: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import httpx

        url = _tls_url(env, kind)
        with httpx.Client(timeout=TIMEOUT_S * 3, verify=_tls_context(env, kind)) as client:
            yield lambda: client.get(url).raise_for_status()

    return prepare


def _requests_tls(kind: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import requests

        url, trust = _tls_url(env, kind), _trust(env, kind) or True
        with requests.Session() as session:
            yield lambda: session.get(url, timeout=TIMEOUT_S * 3, verify=trust).raise_for_status()

    return prepare


def _urllib3_tls(kind: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import urllib3

        url = _tls_url(env, kind)
        with urllib3.PoolManager(
            timeout=TIMEOUT_S * 3, retries=False, ssl_context=_tls_context(env, kind)
        ) as pool:
            yield lambda: pool.request("GET", url)

    return prepare


def _urllib_tls(kind: str) -> Prepare:
    def make(env: FaultEnv) -> Call:
        url, context = _tls_url(env, kind), _tls_context(env, kind)
        return lambda: closing_urlopen(url, TIMEOUT_S * 3, context=context)

    return calling(make)


def _aiohttp_tls(kind: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import aiohttp

        url, context = _tls_url(env, kind), _tls_context(env, kind)

        async def call() -> None:
            timeout = aiohttp.ClientTimeout(total=TIMEOUT_S * 3)
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.get(url, ssl=context) as response,
            ):
                await response.read()

        yield lambda: asyncio.run(call())

    return prepare


@contextmanager
def _boto_tls(env: FaultEnv) -> Iterator[Call]:
    from botocore.config import Config

    client = boto3_session().client(
        "s3",
        region_name="us-east-1",
        endpoint_url=env.tls("untrusted"),
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=1, read_timeout=1),
    )
    try:
        yield lambda: client.get_object(Bucket="s", Key="k")
    finally:
        client.close()


TLS = [
    Case(
        "httpx: an untrusted self-signed certificate is auth_failure, not transient",
        _httpx_tls("untrusted"),
        T.AUTH_FAILURE,
        {**TLS_VERIFY, "exception_type": "ssl.SSLCertVerificationError"},
        why="the server cannot prove who it is, on any retry; ConnectError alone says transient",
    ),
    Case(
        "httpx: a certificate for another host is auth_failure",
        _httpx_tls("other-host"),
        T.AUTH_FAILURE,
        TLS_VERIFY,
        why="a host-name mismatch fails verification: the certificate will not change",
    ),
    Case(
        "httpx: a server demanding a client certificate is auth_failure (inside a ReadError)",
        _httpx_tls("client-cert"),
        T.AUTH_FAILURE,
        TLS_CLIENT_CERT,
        why="TLS 1.3 alerts after the handshake, so httpx says ReadError; the alert decides",
    ),
    # TLS spoken to a plain-text port fails the same way every time: configuration, not a blip.
    Case(
        "httpx: https:// to a plain HTTP port is invalid_input",
        _httpx_tls("plain-port"),
        T.INVALID_INPUT,
        {"provider_code": "WRONG_VERSION_NUMBER"},
        why="TLS spoken to a plain-text port fails the same way every time: a configuration error",
    ),
    Case(
        "requests: an untrusted certificate (SSLError, a ConnectionError) is auth_failure",
        _requests_tls("untrusted"),
        T.AUTH_FAILURE,
        TLS_VERIFY,
        why="requests' SSLError is a ConnectionError; the ssl error three links down decides",
    ),
    Case(
        "requests: a certificate for another host is auth_failure",
        _requests_tls("other-host"),
        T.AUTH_FAILURE,
        TLS_VERIFY,
        why="as with httpx, through urllib3's MaxRetryError.reason",
    ),
    Case(
        "requests: a server demanding a client certificate is auth_failure",
        _requests_tls("client-cert"),
        T.AUTH_FAILURE,
        TLS_CLIENT_CERT,
        why="the fault server drains the connection, so the client reads the alert, not a reset",
    ),
    Case(
        "urllib3: an untrusted certificate is auth_failure",
        _urllib3_tls("untrusted"),
        T.AUTH_FAILURE,
        TLS_VERIFY,
        why="urllib3's own SSLError carries no category; its cause's reason does",
    ),
    Case(
        "urllib3: a server demanding a client certificate is auth_failure",
        _urllib3_tls("client-cert"),
        T.AUTH_FAILURE,
        TLS_CLIENT_CERT,
        why="the certificate-required alert, read on the first response",
    ),
    Case(
        "urllib: an untrusted certificate (URLError) is auth_failure",
        _urllib_tls("untrusted"),
        T.AUTH_FAILURE,
        TLS_VERIFY,
        why="URLError.reason is the ssl error itself",
    ),
    Case(
        "aiohttp: an untrusted certificate (ClientConnectorCertificateError) is auth_failure",
        _aiohttp_tls("untrusted"),
        T.AUTH_FAILURE,
        TLS_VERIFY,
        why="a ClientConnectionError (transient) whose certificate_error says otherwise",
    ),
    Case(
        "aiohttp: a server demanding a client certificate is auth_failure",
        _aiohttp_tls("client-cert"),
        T.AUTH_FAILURE,
        TLS_CLIENT_CERT,
        why="aiohttp reports it as a ClientOSError around the ssl error",
    ),
    Case(
        "boto3: an endpoint with an untrusted certificate (botocore SSLError) is auth_failure",
        _boto_tls,
        T.AUTH_FAILURE,
        TLS_VERIFY,
        why="botocore's SSLError is one of its connection errors; the certificate decides",
    ),
]
