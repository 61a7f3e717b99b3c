"""The corpus: real exceptions raised by real client libraries calling local fault servers
(HTTP statuses, provider bodies, rate-limit headers, slow and dropped responses; TLS servers with
bad certificates; scripted SMTP and FTP servers; an SSH server; AWS services' own error codes),
the machine's PostgreSQL, MariaDB and RabbitMQ, and refused ports, each with the category (and
evidence) the classifier must find, and a one-line reason where the category is not obvious.

Each case prepares what exists before the failure (a client, a session, a pool, an event loop)
and yields the failing call. The corpus test (test_corpus.py) makes the call once and checks
what `classify` says; the classify benchmark (benchmarks/classify.py) times the same call as
the failure path an agent pays before `classify` runs.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from classifier import FailureCategory
from tests.classifier import protocol_faults
from tests.classifier.faults import FaultEnv

T = FailureCategory

TIMEOUT_S = 0.3

# The machine's services some cases call, by the name require_service reports.
POSTGRES, MARIADB, RABBITMQ = "PostgreSQL", "MariaDB", "RabbitMQ"
PRIVATE_POSTGRES = "a PostgreSQL installation (initdb) for a private cluster"

# Who raised the exception, for the benchmark's per-group figures: a client library, the
# standard library or the interpreter itself, or an agent's own wrapper around a library's.
LIBRARY, BUILTINS, WRAPPED = "library", "builtins", "wrapped"

Call = Callable[[], object]
Prepare = Callable[[FaultEnv], AbstractContextManager[Call]]


_PORTS = {POSTGRES: 5432, MARIADB: 3306, RABBITMQ: 5672}


def service_available(needs: str) -> bool:
    """Return whether the service a case needs is here: listening, or installed (initdb)."""
    if needs == PRIVATE_POSTGRES:
        return protocol_faults.postgres_binaries() is not None
    return protocol_faults.listening(_PORTS[needs])


def caught(call: Call) -> BaseException:
    """Return the exception `call` raises."""
    try:
        call()
    except BaseException as exc:
        return exc
    raise AssertionError("the call did not raise")


@dataclass(frozen=True)
class Case:
    """One corpus entry: how to make the failing call, and what classify must say about it."""

    name: str
    prepare: Prepare
    category: FailureCategory
    expect: dict[str, Any] = field(default_factory=dict)
    group: str = LIBRARY
    needs: str | None = None  # a service of the machine the case calls (POSTGRES, ...)
    why: str = ""  # the rationale, in one line, where the name alone does not give it

    def __str__(self) -> str:
        return self.name

    def produce(self, env: FaultEnv) -> BaseException:
        """Return the exception the case's call raises against `env`."""
        with self.prepare(env) as call:
            return caught(call)


def _url(env: FaultEnv, path: str) -> str:
    """Return a scenario's URL, or `path` with the refused and silent ports filled in."""
    return path.format(closed=env.closed, silent=env.silent) if "{" in path else env.at(path)


def _raising(factory: Callable[[], BaseException]) -> Prepare:
    """Return a Prepare whose call raises what `factory` makes (an in-process failure)."""

    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        def call() -> None:
            raise factory()

        yield call

    return prepare


def _calling(make: Callable[[FaultEnv], Call]) -> Prepare:
    """Return a Prepare for a call that needs nothing made beforehand."""

    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        yield make(env)

    return prepare


# --- requests -----------------------------------------------------------------------------------


def _requests(path: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import requests

        url = _url(env, path)
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


def _httpx(path: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import httpx

        url = _url(env, path)
        with httpx.Client(timeout=TIMEOUT_S) as client:
            yield lambda: client.get(url).raise_for_status()

    return prepare


def _httpx_async(path: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import httpx

        url = _url(env, path)
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
        _httpx("status-404"),
        T.RESOURCE_MISSING,
        {"status_code": 404, "signal": "status", "retryable": False},
    ),
    Case("httpx: 401 is auth_failure", _httpx("status-401"), T.AUTH_FAILURE, {"status_code": 401}),
    Case("httpx: 410 is resource_missing", _httpx("status-410"), T.RESOURCE_MISSING),
    Case("httpx: 408 is timeout", _httpx("status-408"), T.TIMEOUT),
    Case(
        "httpx: 429 with an HTTP-date Retry-After",
        _httpx("retry-after-date"),
        T.RATE_LIMITED,
        {"retry_after": lambda v: 25 <= v <= 31},
    ),
    Case(
        "httpx: 429 with a Retry-After date in the past waits 0",
        _httpx("retry-after-past-date"),
        T.RATE_LIMITED,
        {"retry_after": 0.0},
    ),
    Case(
        "httpx: 429 with retry-after-ms",
        _httpx("retry-after-ms"),
        T.RATE_LIMITED,
        {"retry_after": 1.5},
    ),
    Case(
        "httpx: 429 with an epoch X-RateLimit-Reset",
        _httpx("x-ratelimit-reset-epoch"),
        T.RATE_LIMITED,
        {"retry_after": lambda v: 55 <= v <= 61},
    ),
    Case(
        "httpx: 429 with a delta X-RateLimit-Reset",
        _httpx("x-ratelimit-reset-delta"),
        T.RATE_LIMITED,
        {"retry_after": 12.0},
    ),
    Case(
        "httpx: 429 with RateLimit-Reset",
        _httpx("ratelimit-reset"),
        T.RATE_LIMITED,
        {"retry_after": 9.0},
    ),
    Case(
        "httpx: 429 with OpenAI reset durations",
        _httpx("reset-durations"),
        T.RATE_LIMITED,
        {"retry_after": 90.0},
    ),
    Case(
        "httpx: 429 with a garbage Retry-After has no delay",
        _httpx("retry-after-garbage"),
        T.RATE_LIMITED,
        {"retry_after": None},
    ),
    Case("httpx: 502 is server_fault", _httpx("status-502"), T.SERVER_FAULT),
    Case("httpx: 599 is timeout", _httpx("status-599"), T.TIMEOUT),
    Case(
        "httpx: read timeout",
        _httpx("slow"),
        T.TIMEOUT,
        {"exception_type": "httpx.ReadTimeout", "signal": "type"},
    ),
    Case(
        "httpx: connection refused",
        _httpx("http://127.0.0.1:{closed}/"),
        T.TRANSIENT,
        {"exception_type": "httpx.ConnectError"},
    ),
    Case("httpx: server hangs up", _httpx("hangup"), T.TRANSIENT),
    Case("httpx: connection dropped mid-body", _httpx("drop"), T.TRANSIENT),
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

        url = _url(env, path)

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


def _closing_urlopen(url: str, timeout: float = TIMEOUT_S, **options: Any) -> bytes:
    """Read `url` with urlopen as an agent should: an HTTPError holds the open response, which
    is closed before it propagates (its status and headers stay readable)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout, **options) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        exc.close()
        raise


def _urllib(path: str) -> Prepare:
    def make(env: FaultEnv) -> Call:
        url = _url(env, path)
        return lambda: _closing_urlopen(url)

    return _calling(make)


def _urllib3(path: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import urllib3

        url = _url(env, path)
        with urllib3.PoolManager(timeout=TIMEOUT_S, retries=False) as pool:
            yield lambda: pool.request("GET", url, preload_content=True)

    return prepare


URLLIB = [
    Case(
        "urllib: 404 HTTPError is resource_missing",
        _urllib("status-404"),
        T.RESOURCE_MISSING,
        {"status_code": 404},
    ),
    Case(
        "urllib: 429 HTTPError reads Retry-After from its headers",
        _urllib("retry-after-seconds"),
        T.RATE_LIMITED,
        {"retry_after": 7.0},
    ),
    Case(
        "urllib: connection refused (URLError around ConnectionRefusedError)",
        _urllib("http://127.0.0.1:{closed}/"),
        T.TRANSIENT,
        {"exception_type": "builtins.ConnectionRefusedError"},
    ),
    Case("urllib: read timeout", _urllib("slow"), T.TIMEOUT),
    Case("urllib: server hangs up", _urllib("hangup"), T.TRANSIENT),
    Case("urllib: connection dropped mid-body (IncompleteRead)", _urllib("drop"), T.TRANSIENT),
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

# --- botocore -----------------------------------------------------------------------------------


def _boto(service: str, scenario: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import botocore.session
        from botocore.config import Config

        endpoint = env.url if scenario != "refused" else f"http://127.0.0.1:{env.closed}"
        client = botocore.session.get_session().create_client(
            service,
            region_name="us-east-1",
            endpoint_url=endpoint,
            aws_access_key_id="AKIDEXAMPLE",
            aws_secret_access_key="secret",
            config=Config(
                retries={"total_max_attempts": 1},
                connect_timeout=TIMEOUT_S,
                read_timeout=TIMEOUT_S,
                s3={"addressing_style": "path"},
            ),
        )
        try:
            if service == "s3":
                yield lambda: client.get_object(Bucket="s", Key=scenario)
            else:
                yield lambda: client.get_item(TableName=scenario, Key={"k": {"S": "1"}})
        finally:
            client.close()

    return prepare


BOTOCORE = [
    Case(
        "botocore S3: NoSuchKey is resource_missing",
        _boto("s3", "NoSuchKey"),
        T.RESOURCE_MISSING,
        {"provider_code": "NoSuchKey", "status_code": 404},
    ),
    Case(
        "botocore S3: SlowDown (a 503) is rate_limited",
        _boto("s3", "SlowDown"),
        T.RATE_LIMITED,
        {"provider_code": "SlowDown", "signal": "provider_code"},
    ),
    Case("botocore S3: AccessDenied is auth_failure", _boto("s3", "AccessDenied"), T.AUTH_FAILURE),
    Case(
        "botocore S3: ExpiredToken (a 400) is auth_failure",
        _boto("s3", "ExpiredToken"),
        T.AUTH_FAILURE,
    ),
    Case(
        "botocore S3: InternalError is server_fault", _boto("s3", "InternalError"), T.SERVER_FAULT
    ),
    Case("botocore S3: read timeout", _boto("s3", "slow"), T.TIMEOUT),
    Case("botocore S3: connection refused", _boto("s3", "refused"), T.TRANSIENT),
    Case(
        "botocore DynamoDB: ProvisionedThroughputExceeded (a 400) is rate_limited",
        _boto("dynamodb", "ProvisionedThroughputExceededException"),
        T.RATE_LIMITED,
        {"status_code": 400},
    ),
    Case(
        "botocore DynamoDB: ThrottlingException is rate_limited",
        _boto("dynamodb", "ThrottlingException"),
        T.RATE_LIMITED,
    ),
    Case(
        "botocore DynamoDB: ResourceNotFoundException is resource_missing",
        _boto("dynamodb", "ResourceNotFoundException"),
        T.RESOURCE_MISSING,
    ),
    Case(
        "botocore DynamoDB: ValidationException is invalid_input",
        _boto("dynamodb", "ValidationException"),
        T.INVALID_INPUT,
    ),
    Case(
        "botocore DynamoDB: UnrecognizedClientException is auth_failure",
        _boto("dynamodb", "UnrecognizedClientException"),
        T.AUTH_FAILURE,
    ),
    Case(
        "botocore DynamoDB: ExpiredTokenException is auth_failure",
        _boto("dynamodb", "ExpiredTokenException"),
        T.AUTH_FAILURE,
    ),
    Case(
        "botocore DynamoDB: InternalServerError is server_fault",
        _boto("dynamodb", "InternalServerError"),
        T.SERVER_FAULT,
    ),
]

# --- OpenAI and Anthropic SDKs ------------------------------------------------------------------


def _sdk_base(env: FaultEnv, scenario: str) -> str:
    return env.at(scenario) if scenario != "refused" else f"http://127.0.0.1:{env.closed}"


def _openai(scenario: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import openai

        base = _sdk_base(env, scenario)
        with openai.OpenAI(
            api_key="sk-test", base_url=base, max_retries=0, timeout=TIMEOUT_S
        ) as client:
            yield lambda: client.chat.completions.create(
                model="gpt-test", messages=[{"role": "user", "content": "hi"}]
            )

    return prepare


def _anthropic(scenario: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import anthropic

        base = _sdk_base(env, scenario)
        with anthropic.Anthropic(
            api_key="sk-ant-test", base_url=base, max_retries=0, timeout=TIMEOUT_S
        ) as client:
            yield lambda: client.messages.create(
                model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )

    return prepare


LLM_SDKS = [
    Case(
        "openai: insufficient_quota (a 429) is auth_failure and not retryable",
        _openai("openai-quota"),
        T.AUTH_FAILURE,
        {"provider_code": "insufficient_quota", "retryable": False, "status_code": 429},
    ),
    Case(
        "openai: insufficient_quota without x-should-retry is still not retryable",
        _openai("openai-quota-no-flag"),
        T.AUTH_FAILURE,
        {"retryable": False},
    ),
    Case(
        "openai: rate_limit_exceeded honours retry-after-ms first",
        _openai("openai-rate"),
        T.RATE_LIMITED,
        {"retry_after": 0.25, "provider_code": "rate_limit_exceeded"},
    ),
    Case(
        "openai: model_not_found (a 404) is resource_missing",
        _openai("openai-model"),
        T.RESOURCE_MISSING,
        {"provider_code": "model_not_found"},
    ),
    Case("openai: invalid_api_key is auth_failure", _openai("openai-key"), T.AUTH_FAILURE),
    Case(
        "openai: a 400 invalid_request_error is invalid_input",
        _openai("openai-bad"),
        T.INVALID_INPUT,
        {"signal": "status"},
    ),
    Case("openai: server_error is server_fault", _openai("openai-server"), T.SERVER_FAULT),
    Case("openai: APITimeoutError is timeout", _openai("slow"), T.TIMEOUT),
    Case("openai: APIConnectionError is transient", _openai("refused"), T.TRANSIENT),
    Case(
        "anthropic: 529 overloaded_error is server_fault",
        _anthropic("anthropic-overloaded"),
        T.SERVER_FAULT,
        {"status_code": 529, "provider_code": "overloaded_error"},
    ),
    Case(
        "anthropic: rate_limit_error with retry-after",
        _anthropic("anthropic-rate"),
        T.RATE_LIMITED,
        {"retry_after": 20.0},
    ),
    Case(
        "anthropic: authentication_error is auth_failure",
        _anthropic("anthropic-auth"),
        T.AUTH_FAILURE,
    ),
    Case(
        "anthropic: invalid_request_error is invalid_input",
        _anthropic("anthropic-bad"),
        T.INVALID_INPUT,
    ),
    Case(
        "anthropic: not_found_error is resource_missing",
        _anthropic("anthropic-missing"),
        T.RESOURCE_MISSING,
    ),
    Case("anthropic: api_error is server_fault", _anthropic("anthropic-api"), T.SERVER_FAULT),
    Case("anthropic: timeout", _anthropic("slow"), T.TIMEOUT),
    Case("anthropic: connection refused", _anthropic("refused"), T.TRANSIENT),
]

# --- gRPC and google-api-core -------------------------------------------------------------------


def _grpc(status: str | None, *, target: str | None = None) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import grpc

        address = target.format(closed=env.closed) if target else env.grpc
        with grpc.insecure_channel(address) as channel:
            method = "/fault.Fault/Abort" if status else "/fault.Fault/Slow"
            call = channel.unary_unary(
                method, request_serializer=lambda s: s, response_deserializer=lambda b: b
            )
            yield lambda: call((status or "").encode(), timeout=TIMEOUT_S * 3)

    return prepare


def _google(status: str) -> Prepare:
    """google-api-core's exception for the gRPC error the call raises, as its wrappers raise it."""

    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        from google.api_core import exceptions

        with _grpc(status)(env) as grpc_call:

            def call() -> None:
                raise exceptions.from_grpc_error(caught(grpc_call))

            yield call

    return prepare


def _google_http(scenario: str) -> Prepare:
    """google-api-core's exception for an HTTP error response, as its HTTP clients raise it."""

    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import requests
        from google.api_core import exceptions

        url = env.at(scenario)
        with requests.Session() as session:

            def call() -> None:
                raise exceptions.from_http_response(session.get(url, timeout=TIMEOUT_S))

            yield call

    return prepare


GRPC = [
    *(
        Case(
            f"grpc: {status} is {category.value}",
            _grpc(status),
            category,
            {"provider_code": status, "signal": "status"},
        )
        for status, category in (
            ("NOT_FOUND", T.RESOURCE_MISSING),
            ("RESOURCE_EXHAUSTED", T.RATE_LIMITED),
            ("PERMISSION_DENIED", T.AUTH_FAILURE),
            ("UNAUTHENTICATED", T.AUTH_FAILURE),
            ("INVALID_ARGUMENT", T.INVALID_INPUT),
            ("FAILED_PRECONDITION", T.INVALID_INPUT),
            ("UNAVAILABLE", T.TRANSIENT),
            ("INTERNAL", T.SERVER_FAULT),
            ("UNKNOWN", T.SERVER_FAULT),
            ("ABORTED", T.TRANSIENT),
        )
    ),
    Case(
        "grpc: UNIMPLEMENTED is a server_fault that retrying cannot fix",
        _grpc("UNIMPLEMENTED"),
        T.SERVER_FAULT,
        {"retryable": False},
    ),
    Case(
        "grpc: a slow method past its deadline is DEADLINE_EXCEEDED, a timeout",
        _grpc(None),
        T.TIMEOUT,
        {"provider_code": "DEADLINE_EXCEEDED"},
    ),
    Case(
        "grpc: a refused connection is UNAVAILABLE, transient",
        _grpc("NOT_FOUND", target="127.0.0.1:{closed}"),
        T.TRANSIENT,
    ),
    Case(
        "google-api-core: from_grpc_error NOT_FOUND",
        _google("NOT_FOUND"),
        T.RESOURCE_MISSING,
        {"status_code": 404},
    ),
    Case(
        "google-api-core: DEADLINE_EXCEEDED beats its 504", _google("DEADLINE_EXCEEDED"), T.TIMEOUT
    ),
    Case("google-api-core: RESOURCE_EXHAUSTED", _google("RESOURCE_EXHAUSTED"), T.RATE_LIMITED),
    # google-api-core gives each class both an HTTP code and a gRPC status; the gRPC status is
    # the finer one (DEADLINE_EXCEEDED vs 504), so its ServiceUnavailable reads as UNAVAILABLE.
    Case(
        "google-api-core: from_http_response 503 is UNAVAILABLE, transient",
        _google_http("status-503"),
        T.TRANSIENT,
        {"status_code": 503, "provider_code": "UNAVAILABLE"},
    ),
    Case("google-api-core: from_http_response 429", _google_http("status-429"), T.RATE_LIMITED),
]

# --- redis, psycopg -----------------------------------------------------------------------------


def _redis(port_of: Callable[[FaultEnv], int]) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import redis

        client = redis.Redis(
            host="127.0.0.1",
            port=port_of(env),
            socket_connect_timeout=TIMEOUT_S,
            socket_timeout=TIMEOUT_S,
            retry=None,
        )
        try:
            yield client.ping
        finally:
            client.close()

    return prepare


def _psycopg(port_of: Callable[[FaultEnv], int]) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import psycopg

        return lambda: psycopg.connect(
            host="127.0.0.1", port=port_of(env), user="x", dbname="x", connect_timeout=2
        )

    return _calling(make)


DATA_STORES = [
    Case(
        "redis: connection refused is transient",
        _redis(lambda env: env.closed),
        T.TRANSIENT,
        {"exception_type": "redis.exceptions.ConnectionError"},
    ),
    Case("redis: a silent server is a timeout", _redis(lambda env: env.silent), T.TIMEOUT),
    Case(
        "psycopg: connection refused (OperationalError) is transient",
        _psycopg(lambda env: env.closed),
        T.TRANSIENT,
    ),
]

# --- validation libraries, task runners, builtins -----------------------------------------------


@contextmanager
def _pydantic(env: FaultEnv) -> Iterator[Call]:
    import pydantic

    class Query(pydantic.BaseModel):
        text: str
        limit: int

    yield lambda: Query.model_validate({"text": 3, "limit": "many"})


def _jsonschema(env: FaultEnv) -> Call:
    import jsonschema

    schema = {"type": "object", "required": ["query"]}
    return lambda: jsonschema.validate({"q": 1}, schema)


def _celery_soft() -> BaseException:
    from celery.exceptions import SoftTimeLimitExceeded

    return SoftTimeLimitExceeded("soft time limit")


def _celery_hard() -> BaseException:
    from billiard.exceptions import TimeLimitExceeded

    return TimeLimitExceeded(30.0)


def _socket_refused(env: FaultEnv) -> Call:
    return lambda: socket.create_connection(("127.0.0.1", env.closed), timeout=1)


def _socket_timeout(env: FaultEnv) -> Call:
    def call() -> None:
        with socket.create_connection(("127.0.0.1", env.silent), timeout=0.1) as sock:
            sock.recv(1)

    return call


def _broken_pipe(env: FaultEnv) -> Call:
    def call() -> None:
        left, right = socket.socketpair()
        right.close()
        with left:
            for _ in range(100):
                left.sendall(b"x" * 65536)

    return call


def _missing_file(env: FaultEnv) -> Call:
    return lambda: open("/nonexistent/classifier-corpus.txt")


def _asyncio_timeout(env: FaultEnv) -> Call:
    return lambda: asyncio.run(asyncio.wait_for(asyncio.sleep(1), 0.01))


def _futures_timeout(env: FaultEnv) -> Call:
    from concurrent.futures import Future

    return lambda: Future().result(timeout=0.01)


OTHERS = [
    Case(
        "pydantic: ValidationError is invalid_input",
        _pydantic,
        T.INVALID_INPUT,
        {"exception_type": "pydantic_core._pydantic_core.ValidationError"},
    ),
    Case("jsonschema: ValidationError is invalid_input", _calling(_jsonschema), T.INVALID_INPUT),
    Case("celery: soft time limit is timeout", _raising(_celery_soft), T.TIMEOUT),
    Case("billiard: hard time limit is timeout", _raising(_celery_hard), T.TIMEOUT),
    Case(
        "socket: ConnectionRefusedError is transient",
        _calling(_socket_refused),
        T.TRANSIENT,
        group=BUILTINS,
    ),
    Case("socket: socket.timeout is timeout", _calling(_socket_timeout), T.TIMEOUT, group=BUILTINS),
    Case(
        "socket: BrokenPipeError is transient", _calling(_broken_pipe), T.TRANSIENT, group=BUILTINS
    ),
    Case(
        "open: FileNotFoundError is resource_missing",
        _calling(_missing_file),
        T.RESOURCE_MISSING,
        group=BUILTINS,
    ),
    # Root bypasses file modes, so the filesystem cannot be made to refuse us here.
    Case(
        "PermissionError is auth_failure",
        _raising(lambda: PermissionError(13, "Permission denied")),
        T.AUTH_FAILURE,
        group=BUILTINS,
    ),
    Case(
        "asyncio.wait_for timeout is timeout",
        _calling(_asyncio_timeout),
        T.TIMEOUT,
        group=BUILTINS,
    ),
    Case(
        "concurrent.futures timeout is timeout",
        _calling(_futures_timeout),
        T.TIMEOUT,
        group=BUILTINS,
    ),
]

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
        return lambda: _closing_urlopen(url, TIMEOUT_S * 3, context=context)

    return _calling(make)


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
    import boto3
    from botocore.config import Config

    client = boto3.session.Session().client(
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

# --- PostgreSQL: SQLSTATE class 28 through psycopg and asyncpg ----------------------------------
#
# The machine's PostgreSQL trusts every existing role, so a wrong password needs a private
# cluster with password authentication; a role that does not exist fails on either.

MISSING_ROLE, MISSING_DB = "failsight_no_such_role", "failsight_no_such_db"


def _psycopg_login(user: str, dbname: str, *, private: bool = False) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import psycopg

        port = env.private_postgres() if private else 5432
        password = "wrong-password" if private else None
        return lambda: psycopg.connect(
            host="127.0.0.1",
            port=port,
            user=user,
            password=password,
            dbname=dbname,
            connect_timeout=3,
        )

    return _calling(make)


def _asyncpg_login(user: str, database: str, *, private: bool = False) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import asyncpg

        port = env.private_postgres() if private else 5432
        password = "wrong-password" if private else None

        async def call() -> None:
            connection = await asyncpg.connect(
                host="127.0.0.1",
                port=port,
                user=user,
                password=password,
                database=database,
                timeout=3,
            )
            await connection.close()

        return lambda: asyncio.run(call())

    return _calling(make)


def _psycopg_query(sql: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1",
            port=5432,
            user="postgres",
            dbname="postgres",
            connect_timeout=3,
            autocommit=True,
        ) as connection:
            yield lambda: connection.execute(sql)

    return prepare


POSTGRESQL = [
    # libpq keeps only the text of a connection failure: the server's own message for a missing
    # role says "does not exist", but its SQLSTATE is 28000, and the code beats the message.
    Case(
        "psycopg: a role that does not exist is auth_failure (SQLSTATE 28000), not missing",
        _psycopg_login(MISSING_ROLE, "postgres"),
        T.AUTH_FAILURE,
        {"provider_code": "28000", "signal": "provider_code", "retryable": False},
        needs=POSTGRES,
        why="libpq keeps only the text, which is the server's 28000: class 28 beats the message",
    ),
    Case(
        "psycopg: a wrong password is auth_failure (SQLSTATE 28P01)",
        _psycopg_login("postgres", "postgres", private=True),
        T.AUTH_FAILURE,
        {"provider_code": "28P01"},
        needs=PRIVATE_POSTGRES,
        why="a private cluster with scram-sha-256: the machine's trusts every role",
    ),
    Case(
        "psycopg: a database that does not exist is resource_missing (SQLSTATE 3D000)",
        _psycopg_login("postgres", MISSING_DB),
        T.RESOURCE_MISSING,
        {"provider_code": "3D000"},
        needs=POSTGRES,
        why="'does not exist' again, but 3D000: the target is missing, not the credentials",
    ),
    Case(
        "psycopg: a query on a missing table is resource_missing (SQLSTATE 42P01)",
        _psycopg_query("SELECT * FROM failsight_no_such_table"),
        T.RESOURCE_MISSING,
        {"provider_code": "42P01"},
        needs=POSTGRES,
        why="an UndefinedTable names a target that is not there, as MySQL's 1146",
    ),
    Case(
        "psycopg: a syntax error is invalid_input (SQLSTATE 42601)",
        _psycopg_query("SELEC 1"),
        T.INVALID_INPUT,
        {"provider_code": "42601"},
        needs=POSTGRES,
        why="class 42 otherwise: the statement must change",
    ),
    Case(
        "asyncpg: a role that does not exist is auth_failure (its sqlstate 28000)",
        _asyncpg_login(MISSING_ROLE, "postgres"),
        T.AUTH_FAILURE,
        {"provider_code": "28000"},
        needs=POSTGRES,
        why="asyncpg keeps the server's code on the exception",
    ),
    Case(
        "asyncpg: a wrong password is auth_failure (28P01)",
        _asyncpg_login("postgres", "postgres", private=True),
        T.AUTH_FAILURE,
        {"provider_code": "28P01"},
        needs=PRIVATE_POSTGRES,
        why="InvalidPasswordError from the private cluster",
    ),
    Case(
        "asyncpg: a database that does not exist is resource_missing (3D000)",
        _asyncpg_login("postgres", MISSING_DB),
        T.RESOURCE_MISSING,
        {"provider_code": "3D000"},
        needs=POSTGRES,
        why="InvalidCatalogNameError: the same rule through the other driver",
    ),
]

# --- MySQL / MariaDB: error numbers, not their generic SQLSTATE ---------------------------------


def _pymysql_login(password: str | None = None, database: str | None = None) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import pymysql

        return lambda: pymysql.connect(
            host="127.0.0.1",
            user="root",
            password=password or "",
            database=database,
            connect_timeout=3,
        )

    return _calling(make)


def _pymysql_query(*statements: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import pymysql

        connection = pymysql.connect(
            host="127.0.0.1", user="root", database="test", connect_timeout=3
        )
        try:
            with connection.cursor() as cursor:
                for statement in statements[:-1]:
                    cursor.execute(statement)
                yield lambda: cursor.execute(statements[-1])
        finally:
            connection.close()

    return prepare


def _pymysql_refused(env: FaultEnv) -> Call:
    import pymysql

    return lambda: pymysql.connect(host="127.0.0.1", port=env.closed, connect_timeout=1)


MYSQL = [
    Case(
        "PyMySQL: a wrong password is auth_failure (error 1045)",
        _pymysql_login(password="wrong-password"),
        T.AUTH_FAILURE,
        {"provider_code": "1045", "retryable": False},
        needs=MARIADB,
        why="ER_ACCESS_DENIED_ERROR, read from args[0]",
    ),
    # 1049's SQLSTATE is 42000, the syntax-error class: the number says what happened.
    Case(
        "PyMySQL: an unknown database is resource_missing (1049), not its SQLSTATE 42000",
        _pymysql_login(database="failsight_no_such_db"),
        T.RESOURCE_MISSING,
        {"provider_code": "1049"},
        needs=MARIADB,
        why="MySQL files 1049 under the syntax class; the number is the precise signal",
    ),
    Case(
        "PyMySQL: a missing table is resource_missing (1146), not its SQLSTATE 42S02",
        _pymysql_query("SELECT * FROM failsight_no_such_table"),
        T.RESOURCE_MISSING,
        {"provider_code": "1146"},
        needs=MARIADB,
        why="ER_NO_SUCH_TABLE, whose SQLSTATE would read as a syntax error",
    ),
    Case(
        "PyMySQL: a syntax error is invalid_input (1064)",
        _pymysql_query("SELEC 1"),
        T.INVALID_INPUT,
        {"provider_code": "1064"},
        needs=MARIADB,
        why="ER_PARSE_ERROR: the statement must change",
    ),
    Case(
        "PyMySQL: a duplicate key is invalid_input (1062)",
        _pymysql_query(
            "CREATE TEMPORARY TABLE failsight_dup (id INT PRIMARY KEY)",
            "INSERT INTO failsight_dup VALUES (1)",
            "INSERT INTO failsight_dup VALUES (1)",
        ),
        T.INVALID_INPUT,
        {"provider_code": "1062"},
        needs=MARIADB,
        why="ER_DUP_ENTRY (an IntegrityError): retrying inserts the same key",
    ),
    Case(
        "PyMySQL: connection refused is transient (2003)",
        _calling(_pymysql_refused),
        T.TRANSIENT,
        {"provider_code": "2003"},
        why="CR_CONN_HOST_ERROR: nothing listens yet",
    ),
]

# --- message brokers: AMQP reply codes through pika and kombu (py-amqp) -------------------------

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"


def _pika_parameters(port: int = 5672, password: str = "guest", vhost: str = "/") -> Any:
    import pika

    return pika.ConnectionParameters(
        host="127.0.0.1",
        port=port,
        virtual_host=vhost,
        credentials=pika.PlainCredentials("guest", password),
        connection_attempts=1,
        socket_timeout=3,
        blocked_connection_timeout=3,
    )


def _pika_connect(password: str = "guest", vhost: str = "/", refused: bool = False) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import pika

        port = env.closed if refused else 5672
        parameters = _pika_parameters(port, password, vhost)
        return lambda: pika.BlockingConnection(parameters).close()

    return _calling(make)


def _pika_channel(action: Callable[[Any], object]) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import pika

        connection = pika.BlockingConnection(_pika_parameters())
        try:
            yield lambda: action(connection.channel())
        finally:
            connection.close()

    return prepare


def _kombu_connect(url: str) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import kombu

        def call() -> None:
            with kombu.Connection(url, connect_timeout=3) as connection:
                connection.connect()

        return call

    return _calling(make)


def _kombu_channel(action: Callable[[Any], object]) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import kombu

        with kombu.Connection(AMQP_URL, connect_timeout=3) as connection:
            connection.connect()

            def call() -> None:
                channel = connection.channel()
                try:
                    action(channel)
                finally:
                    channel.close()

            yield call

    return prepare


@contextmanager
def _kombu_locked_queue(env: FaultEnv) -> Iterator[Call]:
    """A queue declared exclusive by one connection, declared again by another."""
    import kombu

    name = f"failsight-exclusive-{uuid.uuid4().hex[:12]}"
    with (
        kombu.Connection(AMQP_URL, connect_timeout=3) as owner,
        kombu.Connection(AMQP_URL, connect_timeout=3) as other,
    ):
        owner.default_channel.queue_declare(name, exclusive=True, auto_delete=True)
        yield lambda: other.channel().queue_declare(name, exclusive=True)


BROKERS = [
    Case(
        "pika: a wrong password is auth_failure",
        _pika_connect(password="wrong-password"),
        T.AUTH_FAILURE,
        needs=RABBITMQ,
        why="pika keeps the broker's 403 only in its ProbableAuthenticationError's text and class",
    ),
    Case(
        "pika: a missing virtual host (530 not-allowed) is auth_failure",
        _pika_connect(vhost="failsight-no-such-vhost"),
        T.AUTH_FAILURE,
        needs=RABBITMQ,
        why="RabbitMQ answers 530 alike for a missing vhost and one the user may not open",
    ),
    Case(
        "pika: a missing exchange (channel closed with 404) is resource_missing",
        _pika_channel(lambda ch: ch.exchange_declare("failsight-no-such-exchange", passive=True)),
        T.RESOURCE_MISSING,
        {"provider_code": "404", "signal": "provider_code"},
        needs=RABBITMQ,
        why="ChannelClosedByBroker.reply_code is AMQP's not-found",
    ),
    Case(
        "pika: redeclaring an exchange with another type (406) is invalid_input",
        _pika_channel(lambda ch: ch.exchange_declare("amq.direct", exchange_type="fanout")),
        T.INVALID_INPUT,
        {"provider_code": "406"},
        needs=RABBITMQ,
        why="precondition-failed: the declaration, not the broker, must change",
    ),
    Case(
        "pika: connection refused is transient",
        _pika_connect(refused=True),
        T.TRANSIENT,
        why="AMQPConnectionError: nothing listens yet",
    ),
    Case(
        "kombu: a wrong password (403 access-refused) is auth_failure",
        _kombu_connect("amqp://guest:wrong-password@127.0.0.1:5672//"),
        T.AUTH_FAILURE,
        {"provider_code": "403"},
        needs=RABBITMQ,
        why="py-amqp's AccessRefused carries reply_code 403",
    ),
    # 530 is AMQP's not-allowed, not an HTTP 5xx: it is not a server fault to retry.
    Case(
        "kombu: a missing virtual host (530) is auth_failure, not a server fault",
        _kombu_connect("amqp://guest:guest@127.0.0.1:5672/failsight-no-such-vhost"),
        T.AUTH_FAILURE,
        {"provider_code": "530", "status_code": None},
        needs=RABBITMQ,
        why="530 is AMQP's not-allowed; read as HTTP it was a 5xx to retry",
    ),
    Case(
        "kombu: a passive declare of a missing queue (404) is resource_missing",
        _kombu_channel(lambda ch: ch.queue_declare("failsight-no-such-queue", passive=True)),
        T.RESOURCE_MISSING,
        {"provider_code": "404"},
        needs=RABBITMQ,
        why="py-amqp's NotFound, reply_code 404",
    ),
    Case(
        "kombu: an inequivalent redeclare (406 precondition-failed) is invalid_input",
        _kombu_channel(lambda ch: ch.exchange_declare("amq.direct", "fanout")),
        T.INVALID_INPUT,
        {"provider_code": "406"},
        needs=RABBITMQ,
        why="py-amqp's PreconditionFailed",
    ),
    Case(
        "kombu: another connection's exclusive queue (405 resource-locked) is transient",
        _kombu_locked_queue,
        T.TRANSIENT,
        {"provider_code": "405"},
        needs=RABBITMQ,
        why="the lock goes when the owning connection does",
    ),
]

# --- SSH (paramiko) -----------------------------------------------------------------------------


@contextmanager
def _quiet_paramiko() -> Iterator[None]:
    """Silence paramiko's transport threads, which log the failures the cases cause on purpose."""
    logger = logging.getLogger("paramiko")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def _ssh(scenario: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import paramiko

        from tests.classifier.protocol_faults import SSH_PASSWORD, SSH_USER

        if scenario == "refused":
            port = env.closed
        elif scenario == "garbage":
            port = env.garbage()
        else:
            port = env.ssh().port
        client = paramiko.SSHClient()
        if scenario == "host-key":  # we know another key for this server: it cannot prove itself
            other = paramiko.ECDSAKey.generate()
            client.get_host_keys().add(f"[127.0.0.1]:{port}", other.get_name(), other)
        elif scenario != "unknown-host":
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        password = "wrong-password" if scenario == "password" else SSH_PASSWORD
        options = {"timeout": 2, "banner_timeout": 2, "auth_timeout": 2}

        def call() -> None:
            client.connect(
                "127.0.0.1",
                port=port,
                username=SSH_USER,
                password=password,
                look_for_keys=False,
                allow_agent=False,
                **options,
            )
            try:
                if scenario == "session":
                    client.exec_command("true", timeout=2)
                elif scenario == "forward":
                    client.get_transport().open_channel(
                        "direct-tcpip", ("127.0.0.1", env.closed), ("127.0.0.1", 0), timeout=2
                    )
            finally:
                client.close()

        with _quiet_paramiko():
            try:
                yield call
            finally:
                client.close()

    return prepare


SSH = [
    Case(
        "paramiko: a wrong password is auth_failure",
        _ssh("password"),
        T.AUTH_FAILURE,
        {"exception_type": "paramiko.ssh_exception.AuthenticationException"},
        why="AuthenticationException from the in-process server",
    ),
    Case(
        "paramiko: a host key other than the known one is auth_failure (BadHostKeyException)",
        _ssh("host-key"),
        T.AUTH_FAILURE,
        why="the server fails to prove who it is, as a TLS certificate that fails verification",
    ),
    Case(
        "paramiko: a host key not in known_hosts is auth_failure (the server is unproven)",
        _ssh("unknown-host"),
        T.AUTH_FAILURE,
        why="a plain SSHException; its 'not found' must not make it a missing resource",
    ),
    Case(
        "paramiko: a session channel refused (administratively prohibited) is auth_failure",
        _ssh("session"),
        T.AUTH_FAILURE,
        {"provider_code": "1"},
        why="ChannelException code 1: the server forbids it for this user",
    ),
    Case(
        "paramiko: a forwarded connection the target refused (connect failed) is transient",
        _ssh("forward"),
        T.TRANSIENT,
        {"provider_code": "2"},
        why="ChannelException code 2: the forwarded target refused, as a refused connection",
    ),
    # NoValidConnectionsError keeps one error per address tried, in a dict: read through it.
    Case(
        "paramiko: connection refused (NoValidConnectionsError's errors dict) is transient",
        _ssh("refused"),
        T.TRANSIENT,
        {"exception_type": "builtins.ConnectionRefusedError"},
        why="the refusal sits in a dict of per-address errors, not in __cause__",
    ),
    Case(
        "paramiko: a server that speaks no SSH (protocol banner) is transient",
        _ssh("garbage"),
        T.TRANSIENT,
        why="paramiko cannot tell a wrong port from an overloaded server dropping banners",
    ),
]

# --- FTP (ftplib) and SMTP (smtplib) reply codes --------------------------------------------------


def _ftp(scenario: str) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import ftplib

        def call() -> None:
            port = env.closed if scenario == "refused" else env.script(scenario)
            with ftplib.FTP(timeout=2) as ftp:
                ftp.connect("127.0.0.1", port)
                ftp.login("agent", "password")
                ftp.cwd("/reports/2031")
                ftp.mkd("/reports/2031")

        return call

    return _calling(make)


def _smtp(scenario: str) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import smtplib

        def call() -> None:
            port = env.closed if scenario == "refused" else env.script(scenario)
            with smtplib.SMTP("127.0.0.1", port, timeout=2) as smtp:
                if scenario == "smtp-auth-535":
                    smtp.login("agent", "password")
                smtp.sendmail("agent@fault.test", ["nobody@fault.test"], "Subject: x\r\n\r\nhi")

        return call

    return _calling(make)


FTP_SMTP = [
    Case(
        "ftplib: 530 not logged in is auth_failure",
        _ftp("ftp-login-530"),
        T.AUTH_FAILURE,
        {"provider_code": "530", "signal": "provider_code", "retryable": False},
        why="the reply code that opens error_perm's message",
    ),
    Case(
        "ftplib: 550 no such directory is resource_missing",
        _ftp("ftp-missing-550"),
        T.RESOURCE_MISSING,
        {"provider_code": "550"},
        why="550 file unavailable",
    ),
    Case(
        "ftplib: 421 at the greeting (too many connections) is transient",
        _ftp("ftp-busy-421"),
        T.TRANSIENT,
        {"provider_code": "421"},
        why="error_temp: the server will take us later",
    ),
    Case(
        "ftplib: 452 insufficient storage is server_fault",
        _ftp("ftp-storage-452"),
        T.SERVER_FAULT,
        {"provider_code": "452"},
        why="the server's disk, not our request",
    ),
    Case(
        "smtplib: 535 authentication credentials invalid is auth_failure",
        _smtp("smtp-auth-535"),
        T.AUTH_FAILURE,
        {"provider_code": "535", "retryable": False},
        why="SMTPAuthenticationError.smtp_code",
    ),
    # SMTPRecipientsRefused keeps one (code, reply) per refused address, in a dict.
    Case(
        "smtplib: 550 for every recipient (SMTPRecipientsRefused) is resource_missing",
        _smtp("smtp-recipient-550"),
        T.RESOURCE_MISSING,
        {"provider_code": "550"},
        why="the codes sit in a dict of address -> (code, reply)",
    ),
    Case(
        "smtplib: 421 at the greeting (SMTPConnectError) is transient",
        _smtp("smtp-busy-421"),
        T.TRANSIENT,
        {"provider_code": "421"},
        why="the server closes for now",
    ),
    Case(
        "smtplib: 552 message too big (SMTPDataError) is invalid_input",
        _smtp("smtp-data-552"),
        T.INVALID_INPUT,
        {"provider_code": "552"},
        why="the message must change, not the timing",
    ),
    Case(
        "smtplib: 450 greylisted sender (SMTPSenderRefused) is transient",
        _smtp("smtp-greylisted-450"),
        T.TRANSIENT,
        {"provider_code": "450", "retryable": True},
        why="greylisting asks exactly for a later retry",
    ),
]

# --- cloud services' own codes (boto3 against the local fault endpoint) ---------------------------
#
# Each arrives with an HTTP status that says less (most are plain 400s; Lambda's KMS failure is
# a 502): the service's code decides.


def _aws(service: str, operation: str, **params: Any) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import boto3
        from botocore.config import Config

        client = boto3.session.Session().client(
            service,
            region_name="us-east-1",
            endpoint_url=env.url,
            aws_access_key_id="AKIDEXAMPLE",
            aws_secret_access_key="secret",
            config=Config(
                retries={"total_max_attempts": 1},
                connect_timeout=TIMEOUT_S,
                read_timeout=TIMEOUT_S * 3,
                s3={"addressing_style": "path"},
            ),
        )
        try:
            yield lambda: getattr(client, operation)(**params)
        finally:
            client.close()

    return prepare


CLOUD = [
    Case(
        "boto3 S3: NoSuchBucket is resource_missing",
        _aws("s3", "get_object", Bucket="s", Key="NoSuchBucket"),
        T.RESOURCE_MISSING,
        {"provider_code": "NoSuchBucket"},
        why="the NoSuch family, through boto3",
    ),
    Case(
        "boto3 SQS: a missing queue (a 400, AWS.SimpleQueueService.NonExistentQueue) is missing",
        _aws("sqs", "get_queue_url", QueueName="sqs-missing-queue"),
        T.RESOURCE_MISSING,
        {"status_code": 400, "provider_code": "AWS.SimpleQueueService.NonExistentQueue"},
        why="x-amzn-query-error's namespaced code, read by its last part, beats the 400",
    ),
    Case(
        "boto3 SQS: InvalidSecurity on a 403 stays auth_failure",
        _aws("sqs", "get_queue_url", QueueName="sqs-invalid-security"),
        T.AUTH_FAILURE,
        {"status_code": 403},
        why="an 'Invalid*' code says only 'bad request' and does not override the 403",
    ),
    Case(
        "boto3 KMS: NotFoundException (a 400) is resource_missing",
        _aws("kms", "describe_key", KeyId="kms-missing-key"),
        T.RESOURCE_MISSING,
        {"provider_code": "NotFoundException", "status_code": 400},
        why="the service's own name for a missing key beats the 400",
    ),
    Case(
        "boto3 KMS: DisabledException (a 400) is auth_failure",
        _aws("kms", "encrypt", KeyId="kms-disabled-key", Plaintext=b"x"),
        T.AUTH_FAILURE,
        {"provider_code": "DisabledException"},
        why="a disabled key refuses use until someone enables it",
    ),
    Case(
        "boto3 Secrets Manager: ResourceNotFoundException (a 400) is resource_missing",
        _aws("secretsmanager", "get_secret_value", SecretId="secret-missing"),
        T.RESOURCE_MISSING,
        why="missing secret, sent as a 400",
    ),
    Case(
        "boto3 Secrets Manager: AccessDeniedException (a 400) is auth_failure",
        _aws("secretsmanager", "get_secret_value", SecretId="secret-denied"),
        T.AUTH_FAILURE,
        why="refused access, sent as a 400",
    ),
    Case(
        "boto3 Lambda: KMSAccessDeniedException (a 502) is auth_failure, not a server fault",
        _aws("lambda", "invoke", FunctionName="lambda-kms-denied"),
        T.AUTH_FAILURE,
        {"status_code": 502, "retryable": False},
        why="the function's role cannot use its key: a retry meets the same 502",
    ),
    Case(
        "boto3 Lambda: ResourceNotFoundException (a 404) is resource_missing",
        _aws("lambda", "get_function", FunctionName="lambda-missing"),
        T.RESOURCE_MISSING,
        why="x-amzn-ErrorType of a REST-JSON service",
    ),
    Case(
        "boto3 STS: InvalidIdentityToken (a 400) is auth_failure",
        _aws(
            "sts",
            "assume_role_with_web_identity",
            RoleArn="arn:aws:iam::123456789012:role/agent",
            RoleSessionName="agent",
            WebIdentityToken="sts-bad-token",
        ),
        T.AUTH_FAILURE,
        {"provider_code": "InvalidIdentityToken"},
        why="an exact entry before the generic 'Invalid' prefix",
    ),
    Case(
        "boto3 SNS: AuthorizationError is auth_failure",
        _aws("sns", "publish", TopicArn="sns-not-authorized", Message="hi"),
        T.AUTH_FAILURE,
        why="a query-protocol XML error",
    ),
    Case(
        "boto3 IAM: NoSuchEntity is resource_missing",
        _aws("iam", "get_user", UserName="iam-no-such-user"),
        T.RESOURCE_MISSING,
        why="IAM's own name for a missing user",
    ),
    Case(
        "boto3 EC2: InvalidParameterValue (a 400) is invalid_input",
        _aws("ec2", "describe_instances", InstanceIds=["ec2-bad-parameter"]),
        T.INVALID_INPUT,
        {"provider_code": "InvalidParameterValue", "status_code": 400},
        why="a generic code: the 400 says as much",
    ),
    Case(
        "boto3 EC2: InvalidInstanceID.NotFound (a 400) is resource_missing",
        _aws("ec2", "describe_instances", InstanceIds=["ec2-missing-instance"]),
        T.RESOURCE_MISSING,
        why="the NotFound suffix beats the Invalid prefix and the 400",
    ),
    Case(
        "boto3 EC2: UnauthorizedOperation is auth_failure",
        _aws("ec2", "describe_instances", InstanceIds=["ec2-unauthorized"]),
        T.AUTH_FAILURE,
        why="EC2's XML error shape",
    ),
]

# --- causes kept in containers: exception groups, a retry library's last attempt ----------------


def _task_group(env: FaultEnv) -> Call:
    """Two searches in an asyncio.TaskGroup: one fails with a 404, the other is cancelled."""
    import httpx

    url = env.at("status-404")

    async def search(client: httpx.AsyncClient) -> None:
        (await client.get(url)).raise_for_status()

    async def main() -> None:
        async with httpx.AsyncClient(timeout=TIMEOUT_S) as client, asyncio.TaskGroup() as group:
            group.create_task(search(client))
            group.create_task(asyncio.sleep(5))

    return lambda: asyncio.run(main())


def _all_errors(env: FaultEnv) -> Call:
    return lambda: socket.create_connection(("127.0.0.1", env.closed), 1, all_errors=True)


def _tenacity(path: str, attempts: int = 2) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import httpx
        import tenacity

        url = env.at(path)
        with httpx.Client(timeout=TIMEOUT_S) as client:
            retrying = tenacity.Retrying(
                stop=tenacity.stop_after_attempt(attempts), wait=tenacity.wait_none()
            )
            yield lambda: retrying(lambda: client.get(url).raise_for_status())

    return prepare


CONTAINERS = [
    Case(
        "asyncio.TaskGroup: an ExceptionGroup around an httpx 404 is resource_missing",
        _calling(_task_group),
        T.RESOURCE_MISSING,
        {"exception_type": "httpx.HTTPStatusError", "status_code": 404},
        why="the group's member decides; the cancelled sibling adds nothing",
    ),
    Case(
        "socket.create_connection(all_errors=True): an ExceptionGroup of refusals is transient",
        _calling(_all_errors),
        T.TRANSIENT,
        {"exception_type": "builtins.ConnectionRefusedError"},
        group=BUILTINS,
        why="Python 3.11 keeps one error per address in a group",
    ),
    Case(
        "tenacity: RetryError after two 503s is server_fault (its last attempt decides)",
        _tenacity("status-503"),
        T.SERVER_FAULT,
        {"status_code": 503, "exception_type": "httpx.HTTPStatusError"},
        why="RetryError says nothing; its last attempt does",
    ),
    Case(
        "tenacity: RetryError after two 404s is resource_missing, not retryable",
        _tenacity("status-404"),
        T.RESOURCE_MISSING,
        {"retryable": False},
        why="retrying more would not find the page",
    ),
]

# --- an agent's own wrappers around a library's exception ---------------------------------------


class ToolError(Exception):
    """What an agent's tool wrapper raises: no signal of its own."""


def _wrapped(inner: Prepare, wrapper: Callable[[], BaseException]) -> Prepare:
    """Return a Prepare whose call raises `wrapper()` from the exception `inner`'s call raises."""

    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        with inner(env) as inner_call:

            def call() -> None:
                try:
                    inner_call()
                except Exception as exc:
                    raise wrapper() from exc

            yield call

    return prepare


AGENT_WRAPPERS = [
    Case(
        "agent: RuntimeError raised from a urllib 404 HTTPError is resource_missing",
        _wrapped(_urllib("status-404"), lambda: RuntimeError("tool failed")),
        T.RESOURCE_MISSING,
        {"exception_type": "urllib.error.HTTPError", "signal": "status"},
        group=WRAPPED,
    ),
    Case(
        "agent: ToolError raised from an httpx read timeout is timeout",
        _wrapped(_httpx("slow"), lambda: ToolError("search failed")),
        T.TIMEOUT,
        {"exception_type": "httpx.ReadTimeout", "signal": "type"},
        group=WRAPPED,
    ),
    Case(
        "agent: ToolError raised from a botocore throttle is rate_limited",
        _wrapped(_boto("dynamodb", "ThrottlingException"), lambda: ToolError("lookup failed")),
        T.RATE_LIMITED,
        {"provider_code": "ThrottlingException", "status_code": 400},
        group=WRAPPED,
    ),
]

SECTIONS = {
    "requests": REQUESTS,
    "httpx": HTTPX,
    "aiohttp": AIOHTTP,
    "urllib": URLLIB,
    "botocore": BOTOCORE,
    "LLM SDKs": LLM_SDKS,
    "gRPC": GRPC,
    "data stores": DATA_STORES,
    "others": OTHERS,
    "TLS": TLS,
    "PostgreSQL": POSTGRESQL,
    "MySQL": MYSQL,
    "brokers": BROKERS,
    "SSH": SSH,
    "FTP and SMTP": FTP_SMTP,
    "cloud codes": CLOUD,
    "containers": CONTAINERS,
    "agent wrappers": AGENT_WRAPPERS,
}
CORPUS = [case for cases in SECTIONS.values() for case in cases]
