"""The corpus: real exceptions raised by real client libraries calling a local fault-injecting
server (statuses, provider bodies, rate-limit headers, slow and dropped responses) and refused
ports, each with the category (and evidence) the classifier must find.

Each case prepares what exists before the failure (a client, a session, a pool, an event loop)
and yields the failing call. The corpus test (test_corpus.py) makes the call once and checks
what `classify` says; the classify benchmark (benchmarks/classify.py) times the same call as
the failure path an agent pays before `classify` runs.
"""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from classifier import FailureCategory
from tests.classifier.faults import FaultEnv

T = FailureCategory

TIMEOUT_S = 0.3

# Who raised the exception, for the benchmark's per-group figures: a client library, the
# standard library or the interpreter itself, or an agent's own wrapper around a library's.
LIBRARY, BUILTINS, WRAPPED = "library", "builtins", "wrapped"

Call = Callable[[], object]
Prepare = Callable[[FaultEnv], AbstractContextManager[Call]]


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


def _urllib(path: str) -> Prepare:
    def make(env: FaultEnv) -> Call:
        url = _url(env, path)
        return lambda: urllib.request.urlopen(url, timeout=TIMEOUT_S).read()

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
    "agent wrappers": AGENT_WRAPPERS,
}
CORPUS = [case for cases in SECTIONS.values() for case in cases]
