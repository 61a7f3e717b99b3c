"""The corpus: real exceptions raised by real client libraries calling a local fault-injecting
server (statuses, provider bodies, rate-limit headers, slow and dropped responses) and refused
ports, each with the category (and evidence) the classifier must find."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from classifier import FailureCategory, classify
from tests.classifier.conftest import FaultEnv

T = FailureCategory

TIMEOUT_S = 0.3


def caught(call: Callable[[], Any]) -> BaseException:
    """Return the exception `call` raises; fail the test if it raises none."""
    try:
        call()
    except BaseException as exc:
        return exc
    pytest.fail("the call did not raise")


@dataclass(frozen=True)
class Case:
    """One corpus entry: how to produce the exception, and what classify must say about it."""

    name: str
    produce: Callable[[FaultEnv], BaseException]
    category: FailureCategory
    expect: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name


# --- requests -----------------------------------------------------------------------------------


def _requests(path: str, **kwargs: Any) -> Callable[[FaultEnv], BaseException]:
    def produce(env: FaultEnv) -> BaseException:
        import requests

        def call() -> None:
            url = path.format(closed=env.closed, silent=env.silent) if "{" in path else env.at(path)
            requests.get(url, timeout=TIMEOUT_S, **kwargs).raise_for_status()

        return caught(call)

    return produce


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


def _httpx(path: str) -> Callable[[FaultEnv], BaseException]:
    def produce(env: FaultEnv) -> BaseException:
        import httpx

        url = path.format(closed=env.closed) if "{" in path else env.at(path)
        return caught(lambda: httpx.get(url, timeout=TIMEOUT_S).raise_for_status())

    return produce


def _httpx_async(path: str) -> Callable[[FaultEnv], BaseException]:
    def produce(env: FaultEnv) -> BaseException:
        import httpx

        url = path.format(closed=env.closed) if "{" in path else env.at(path)

        async def call() -> None:
            async with httpx.AsyncClient(timeout=TIMEOUT_S) as client:
                (await client.get(url)).raise_for_status()

        return caught(lambda: asyncio.run(call()))

    return produce


HTTPX = [
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


def _aiohttp(path: str) -> Callable[[FaultEnv], BaseException]:
    def produce(env: FaultEnv) -> BaseException:
        import aiohttp

        url = path.format(closed=env.closed) if "{" in path else env.at(path)

        async def call() -> None:
            timeout = aiohttp.ClientTimeout(total=TIMEOUT_S * 2, sock_read=TIMEOUT_S)
            async with (
                aiohttp.ClientSession(timeout=timeout, raise_for_status=True) as session,
                session.get(url) as response,
            ):
                await response.read()

        return caught(lambda: asyncio.run(call()))

    return produce


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


def _urllib(path: str) -> Callable[[FaultEnv], BaseException]:
    def produce(env: FaultEnv) -> BaseException:
        url = path.format(closed=env.closed) if "{" in path else env.at(path)
        return caught(lambda: urllib.request.urlopen(url, timeout=TIMEOUT_S).read())

    return produce


def _urllib3(path: str) -> Callable[[FaultEnv], BaseException]:
    def produce(env: FaultEnv) -> BaseException:
        import urllib3

        url = path.format(closed=env.closed) if "{" in path else env.at(path)
        pool = urllib3.PoolManager(timeout=TIMEOUT_S, retries=False)
        return caught(lambda: pool.request("GET", url, preload_content=True))

    return produce


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


def _boto(service: str, scenario: str, **config: Any) -> Callable[[FaultEnv], BaseException]:
    def produce(env: FaultEnv) -> BaseException:
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
                **config,
            ),
        )
        if service == "s3":
            return caught(lambda: client.get_object(Bucket="s", Key=scenario))
        return caught(lambda: client.get_item(TableName=scenario, Key={"k": {"S": "1"}}))

    return produce


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


def _openai(scenario: str) -> Callable[[FaultEnv], BaseException]:
    def produce(env: FaultEnv) -> BaseException:
        import openai

        base = env.at(scenario) if scenario != "refused" else f"http://127.0.0.1:{env.closed}"
        client = openai.OpenAI(api_key="sk-test", base_url=base, max_retries=0, timeout=TIMEOUT_S)
        return caught(
            lambda: client.chat.completions.create(
                model="gpt-test", messages=[{"role": "user", "content": "hi"}]
            )
        )

    return produce


def _anthropic(scenario: str) -> Callable[[FaultEnv], BaseException]:
    def produce(env: FaultEnv) -> BaseException:
        import anthropic

        base = env.at(scenario) if scenario != "refused" else f"http://127.0.0.1:{env.closed}"
        client = anthropic.Anthropic(
            api_key="sk-ant-test", base_url=base, max_retries=0, timeout=TIMEOUT_S
        )
        return caught(
            lambda: client.messages.create(
                model="claude-test", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
            )
        )

    return produce


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


def _grpc(status: str | None, *, target: str | None = None) -> Callable[[FaultEnv], BaseException]:
    def produce(env: FaultEnv) -> BaseException:
        import grpc

        address = target.format(closed=env.closed) if target else env.grpc
        with grpc.insecure_channel(address) as channel:
            method = "/fault.Fault/Abort" if status else "/fault.Fault/Slow"
            call = channel.unary_unary(
                method, request_serializer=lambda s: s, response_deserializer=lambda b: b
            )
            return caught(lambda: call((status or "").encode(), timeout=TIMEOUT_S * 3))

    return produce


def _google(status: str) -> Callable[[FaultEnv], BaseException]:
    def produce(env: FaultEnv) -> BaseException:
        from google.api_core import exceptions

        return exceptions.from_grpc_error(_grpc(status)(env))

    return produce


def _google_http(scenario: str) -> Callable[[FaultEnv], BaseException]:
    def produce(env: FaultEnv) -> BaseException:
        import requests
        from google.api_core import exceptions

        return exceptions.from_http_response(requests.get(env.at(scenario), timeout=TIMEOUT_S))

    return produce


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


def _redis(port_of: Callable[[FaultEnv], int]) -> Callable[[FaultEnv], BaseException]:
    def produce(env: FaultEnv) -> BaseException:
        import redis

        client = redis.Redis(
            host="127.0.0.1",
            port=port_of(env),
            socket_connect_timeout=TIMEOUT_S,
            socket_timeout=TIMEOUT_S,
            retry=None,
        )
        return caught(client.ping)

    return produce


def _psycopg(port_of: Callable[[FaultEnv], int]) -> Callable[[FaultEnv], BaseException]:
    def produce(env: FaultEnv) -> BaseException:
        import psycopg

        return caught(
            lambda: psycopg.connect(
                host="127.0.0.1", port=port_of(env), user="x", dbname="x", connect_timeout=2
            )
        )

    return produce


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


def _pydantic(env: FaultEnv) -> BaseException:
    import pydantic

    class Query(pydantic.BaseModel):
        text: str
        limit: int

    return caught(lambda: Query.model_validate({"text": 3, "limit": "many"}))


def _jsonschema(env: FaultEnv) -> BaseException:
    import jsonschema

    schema = {"type": "object", "required": ["query"]}
    return caught(lambda: jsonschema.validate({"q": 1}, schema))


def _celery_soft(env: FaultEnv) -> BaseException:
    from celery.exceptions import SoftTimeLimitExceeded

    return caught(lambda: (_ for _ in ()).throw(SoftTimeLimitExceeded("soft time limit")))


def _celery_hard(env: FaultEnv) -> BaseException:
    from billiard.exceptions import TimeLimitExceeded

    return caught(lambda: (_ for _ in ()).throw(TimeLimitExceeded(30.0)))


def _socket_refused(env: FaultEnv) -> BaseException:
    return caught(lambda: socket.create_connection(("127.0.0.1", env.closed), timeout=1))


def _socket_timeout(env: FaultEnv) -> BaseException:
    def call() -> None:
        with socket.create_connection(("127.0.0.1", env.silent), timeout=0.1) as sock:
            sock.recv(1)

    return caught(call)


def _broken_pipe(env: FaultEnv) -> BaseException:
    def call() -> None:
        left, right = socket.socketpair()
        right.close()
        with left:
            for _ in range(100):
                left.sendall(b"x" * 65536)

    return caught(call)


def _missing_file(env: FaultEnv) -> BaseException:
    return caught(lambda: open("/nonexistent/classifier-corpus.txt"))


def _asyncio_timeout(env: FaultEnv) -> BaseException:
    return caught(lambda: asyncio.run(asyncio.wait_for(asyncio.sleep(1), 0.01)))


def _futures_timeout(env: FaultEnv) -> BaseException:
    from concurrent.futures import Future

    return caught(lambda: Future().result(timeout=0.01))


def _permission(env: FaultEnv) -> BaseException:
    # Root bypasses file modes, so the filesystem cannot be made to refuse us here.
    return caught(lambda: (_ for _ in ()).throw(PermissionError(13, "Permission denied")))


OTHERS = [
    Case(
        "pydantic: ValidationError is invalid_input",
        _pydantic,
        T.INVALID_INPUT,
        {"exception_type": "pydantic_core._pydantic_core.ValidationError"},
    ),
    Case("jsonschema: ValidationError is invalid_input", _jsonschema, T.INVALID_INPUT),
    Case("celery: soft time limit is timeout", _celery_soft, T.TIMEOUT),
    Case("billiard: hard time limit is timeout", _celery_hard, T.TIMEOUT),
    Case("socket: ConnectionRefusedError is transient", _socket_refused, T.TRANSIENT),
    Case("socket: socket.timeout is timeout", _socket_timeout, T.TIMEOUT),
    Case("socket: BrokenPipeError is transient", _broken_pipe, T.TRANSIENT),
    Case("open: FileNotFoundError is resource_missing", _missing_file, T.RESOURCE_MISSING),
    Case("PermissionError is auth_failure", _permission, T.AUTH_FAILURE),
    Case("asyncio.wait_for timeout is timeout", _asyncio_timeout, T.TIMEOUT),
    Case("concurrent.futures timeout is timeout", _futures_timeout, T.TIMEOUT),
]

CORPUS = [*REQUESTS, *HTTPX, *AIOHTTP, *URLLIB, *BOTOCORE, *LLM_SDKS, *GRPC, *DATA_STORES, *OTHERS]


@pytest.mark.parametrize("case", CORPUS, ids=str)
def test_it_classifies_each_real_library_exception(case: Case, faults_env: FaultEnv) -> None:
    exc = case.produce(faults_env)
    failure = classify(exc)
    assert failure.category is case.category, (failure, exc.__class__)
    for name, expected in case.expect.items():
        actual = getattr(failure, name)
        if callable(expected):
            assert expected(actual), (name, actual)
        else:
            assert actual == expected, (name, actual, failure)
    assert failure.chain and failure.chain[0].startswith(
        f"{type(exc).__module__}.{type(exc).__qualname__}: "
    )


def test_the_corpus_covers_every_category_but_unclassified() -> None:
    assert {case.category for case in CORPUS} == set(FailureCategory) - {T.UNCLASSIFIED}


def test_it_reads_a_urllib_http_error_carried_inside_a_wrapper(faults_env: FaultEnv) -> None:
    inner = caught(lambda: urllib.request.urlopen(faults_env.at("status-404"), timeout=1))
    assert isinstance(inner, urllib.error.HTTPError)
    try:
        raise RuntimeError("tool failed") from inner
    except RuntimeError as outer:
        failure = classify(outer)
    assert failure.category is T.RESOURCE_MISSING
    assert failure.exception_type == "urllib.error.HTTPError"
    assert failure.chain[0] == "builtins.RuntimeError: tool failed"
