"""HTTP clients: requests, httpx (sync and async), aiohttp, urllib and urllib3."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.classifier.corpus.cases import (
    TIMEOUT_S,
    Call,
    Case,
    Prepare,
    T,
    calling,
    scenario_url,
)
from tests.classifier.faults import FaultEnv

# --- requests -----------------------------------------------------------------------------------


def _requests(path: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import requests

        url = scenario_url(env, path)
        with requests.Session() as session:
            yield lambda: session.get(url, timeout=TIMEOUT_S).raise_for_status()

    return prepare


REQUESTS = [
    Case(
        "requests: 404 is resource_missing",
        _requests("status-404"),
        T.RESOURCE_MISSING,
        {"status_code": 404, "signal": "status", "retryable": False},
    ),
    Case("requests: 409 is invalid_input, not transient", _requests("status-409"), T.INVALID_INPUT),
    Case("requests: 418 (unknown 4xx) is invalid_input", _requests("status-418"), T.INVALID_INPUT),
    Case(
        "requests: 429 with Retry-After seconds is rate_limited",
        _requests("retry-after-seconds"),
        T.RATE_LIMITED,
        {"retry_after": 7.0, "retryable": True},
    ),
    Case(
        "requests: 503 with Retry-After is server_fault",
        _requests("unavailable-retry-after"),
        T.SERVER_FAULT,
        {"retry_after": 4.0},
    ),
    Case(
        "requests: 501 is a server_fault that retrying cannot fix",
        _requests("status-501"),
        T.SERVER_FAULT,
        {"retryable": False},
    ),
    Case(
        "requests: read timeout",
        _requests("slow"),
        T.TIMEOUT,
        {"exception_type": "requests.exceptions.ReadTimeout"},
    ),
    Case(
        "requests: connection refused",
        _requests("http://127.0.0.1:{closed}/"),
        T.TRANSIENT,
        {"exception_type": "requests.exceptions.ConnectionError"},
    ),
    Case("requests: server hangs up without answering", _requests("hangup"), T.TRANSIENT),
    Case("requests: connection dropped mid-body", _requests("drop"), T.TRANSIENT),
]


# --- httpx (sync and async) ---------------------------------------------------------------------


def httpx_get(path: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import httpx

        url = scenario_url(env, path)
        with httpx.Client(timeout=TIMEOUT_S) as client:
            yield lambda: client.get(url).raise_for_status()

    return prepare


def _httpx_async(path: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import httpx

        url = scenario_url(env, path)
        client = httpx.AsyncClient(timeout=TIMEOUT_S)

        async def call() -> None:
            (await client.get(url)).raise_for_status()

        with asyncio.Runner() as runner:
            try:
                yield lambda: runner.run(call())
            finally:
                runner.run(client.aclose())

    return prepare


HTTPX = [
    Case(
        "httpx: 404 is resource_missing",
        httpx_get("status-404"),
        T.RESOURCE_MISSING,
        {"status_code": 404, "signal": "status", "retryable": False},
    ),
    Case(
        "httpx: 401 is auth_failure", httpx_get("status-401"), T.AUTH_FAILURE, {"status_code": 401}
    ),
    Case("httpx: 410 is resource_missing", httpx_get("status-410"), T.RESOURCE_MISSING),
    Case("httpx: 408 is timeout", httpx_get("status-408"), T.TIMEOUT),
    Case(
        "httpx: 429 with an HTTP-date Retry-After",
        httpx_get("retry-after-date"),
        T.RATE_LIMITED,
        {"retry_after": lambda v: 25 <= v <= 31},
    ),
    Case(
        "httpx: 429 with a Retry-After date in the past waits 0",
        httpx_get("retry-after-past-date"),
        T.RATE_LIMITED,
        {"retry_after": 0.0},
    ),
    Case(
        "httpx: 429 with retry-after-ms",
        httpx_get("retry-after-ms"),
        T.RATE_LIMITED,
        {"retry_after": 1.5},
    ),
    Case(
        "httpx: 429 with an epoch X-RateLimit-Reset",
        httpx_get("x-ratelimit-reset-epoch"),
        T.RATE_LIMITED,
        {"retry_after": lambda v: 55 <= v <= 61},
    ),
    Case(
        "httpx: 429 with a delta X-RateLimit-Reset",
        httpx_get("x-ratelimit-reset-delta"),
        T.RATE_LIMITED,
        {"retry_after": 12.0},
    ),
    Case(
        "httpx: 429 with RateLimit-Reset",
        httpx_get("ratelimit-reset"),
        T.RATE_LIMITED,
        {"retry_after": 9.0},
    ),
    Case(
        "httpx: 429 with OpenAI reset durations",
        httpx_get("reset-durations"),
        T.RATE_LIMITED,
        {"retry_after": 90.0},
    ),
    Case(
        "httpx: 429 with a garbage Retry-After has no delay",
        httpx_get("retry-after-garbage"),
        T.RATE_LIMITED,
        {"retry_after": None},
    ),
    Case("httpx: 502 is server_fault", httpx_get("status-502"), T.SERVER_FAULT),
    Case("httpx: 599 is timeout", httpx_get("status-599"), T.TIMEOUT),
    Case(
        "httpx: read timeout",
        httpx_get("slow"),
        T.TIMEOUT,
        {"exception_type": "httpx.ReadTimeout", "signal": "type"},
    ),
    Case(
        "httpx: connection refused",
        httpx_get("http://127.0.0.1:{closed}/"),
        T.TRANSIENT,
        {"exception_type": "httpx.ConnectError"},
    ),
    Case("httpx: server hangs up", httpx_get("hangup"), T.TRANSIENT),
    Case("httpx: connection dropped mid-body", httpx_get("drop"), T.TRANSIENT),
    Case("httpx async: 422 is invalid_input", _httpx_async("status-422"), T.INVALID_INPUT),
    Case("httpx async: 500 is server_fault", _httpx_async("status-500"), T.SERVER_FAULT),
    Case("httpx async: read timeout", _httpx_async("slow"), T.TIMEOUT),
    Case(
        "httpx async: connection refused", _httpx_async("http://127.0.0.1:{closed}/"), T.TRANSIENT
    ),
]


# --- aiohttp ------------------------------------------------------------------------------------


def _aiohttp(path: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import aiohttp

        url = scenario_url(env, path)

        async def open_session() -> aiohttp.ClientSession:
            timeout = aiohttp.ClientTimeout(total=TIMEOUT_S * 2, sock_read=TIMEOUT_S)
            return aiohttp.ClientSession(timeout=timeout, raise_for_status=True)

        with asyncio.Runner() as runner:
            session = runner.run(open_session())

            async def call() -> None:
                async with session.get(url) as response:
                    await response.read()

            try:
                yield lambda: runner.run(call())
            finally:
                runner.run(session.close())

    return prepare


AIOHTTP = [
    Case(
        "aiohttp: 403 is auth_failure", _aiohttp("status-403"), T.AUTH_FAILURE, {"status_code": 403}
    ),
    Case(
        "aiohttp: 429 with Retry-After",
        _aiohttp("retry-after-seconds"),
        T.RATE_LIMITED,
        {"retry_after": 7.0},
    ),
    Case("aiohttp: 504 is server_fault", _aiohttp("status-504"), T.SERVER_FAULT),
    Case("aiohttp: read timeout", _aiohttp("slow"), T.TIMEOUT),
    Case("aiohttp: connection refused", _aiohttp("http://127.0.0.1:{closed}/"), T.TRANSIENT),
    Case("aiohttp: server disconnects", _aiohttp("hangup"), T.TRANSIENT),
    Case("aiohttp: payload cut mid-body", _aiohttp("drop"), T.TRANSIENT),
]


# --- urllib and urllib3 -------------------------------------------------------------------------


def closing_urlopen(url: str, timeout: float = TIMEOUT_S, **options: Any) -> bytes:
    """Read `url` with urlopen as an agent should: an HTTPError holds the open response, which
    is closed before it propagates (its status and headers stay readable)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, **options) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        exc.close()
        raise


def urllib_get(path: str) -> Prepare:
    def make(env: FaultEnv) -> Call:
        url = scenario_url(env, path)
        return lambda: closing_urlopen(url)

    return calling(make)


def _urllib3(path: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import urllib3

        url = scenario_url(env, path)
        with urllib3.PoolManager(timeout=TIMEOUT_S, retries=False) as pool:
            yield lambda: pool.request("GET", url, preload_content=True)

    return prepare


URLLIB = [
    Case(
        "urllib: 404 HTTPError is resource_missing",
        urllib_get("status-404"),
        T.RESOURCE_MISSING,
        {"status_code": 404},
    ),
    Case(
        "urllib: 429 HTTPError reads Retry-After from its headers",
        urllib_get("retry-after-seconds"),
        T.RATE_LIMITED,
        {"retry_after": 7.0},
    ),
    Case(
        "urllib: connection refused (URLError around ConnectionRefusedError)",
        urllib_get("http://127.0.0.1:{closed}/"),
        T.TRANSIENT,
        {"exception_type": "builtins.ConnectionRefusedError"},
    ),
    Case("urllib: read timeout", urllib_get("slow"), T.TIMEOUT),
    Case("urllib: server hangs up", urllib_get("hangup"), T.TRANSIENT),
    Case("urllib: connection dropped mid-body (IncompleteRead)", urllib_get("drop"), T.TRANSIENT),
    Case(
        "urllib3: connection refused (NewConnectionError, not a timeout)",
        _urllib3("http://127.0.0.1:{closed}/"),
        T.TRANSIENT,
    ),
    Case(
        "urllib3: read timeout",
        _urllib3("slow"),
        T.TIMEOUT,
        {"exception_type": "urllib3.exceptions.ReadTimeoutError"},
    ),
    Case("urllib3: connection dropped mid-body", _urllib3("drop"), T.TRANSIENT),
]
