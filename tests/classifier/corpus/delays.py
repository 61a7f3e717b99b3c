"""How long to wait, said where Retry-After is not: a JSON body's retry_after / retryAfter /
retry_after_ms, the IETF structured RateLimit field, and google.rpc RetryInfo (in a JSON error's
details and in a gRPC status's details); a header beats a body when both say."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from tests.classifier.corpus.apis import _grpc
from tests.classifier.corpus.cases import TIMEOUT_S, Call, Case, Prepare, T, caught
from tests.classifier.faults import RETRY_INFO_REQUEST, FaultEnv


def _httpx(scenario: str) -> Prepare:
    """httpx reads the whole body before raise_for_status: the response keeps it in memory."""

    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import httpx

        url = env.at(scenario)
        with httpx.Client(timeout=TIMEOUT_S * 3) as client:
            yield lambda: client.get(url).raise_for_status()

    return prepare


def _google_http(scenario: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import requests
        from google.api_core import exceptions

        url = env.at(scenario)
        with requests.Session() as session:

            def call() -> None:
                raise exceptions.from_http_response(session.get(url, timeout=TIMEOUT_S * 3))

            yield call

    return prepare


@contextmanager
def _google_grpc_retry_info(env: FaultEnv) -> Iterator[Call]:
    from google.api_core import exceptions

    with _grpc(RETRY_INFO_REQUEST.decode())(env) as grpc_call:

        def call() -> None:
            raise exceptions.from_grpc_error(caught(grpc_call))

        yield call


DELAYS = [
    Case(
        "httpx: a 429 whose JSON body says retry_after 6.5 waits 6.5 s",
        _httpx("body-retry-after"),
        T.RATE_LIMITED,
        {"retry_after": 6.5, "status_code": 429},
        why="Discord-style: the delay is in the body, no header says it",
    ),
    Case(
        "httpx: a body's error.retry_after_ms 2500 waits 2.5 s",
        _httpx("body-retry-after-ms"),
        T.RATE_LIMITED,
        {"retry_after": 2.5},
    ),
    Case(
        "httpx: a 503 whose body says retryAfter 11 waits 11 s",
        _httpx("body-retry-after-camel"),
        T.SERVER_FAULT,
        {"retry_after": 11.0},
    ),
    Case(
        'httpx: RateLimit: "default";r=0;t=50 waits 50 s',
        _httpx("ratelimit-structured"),
        T.RATE_LIMITED,
        {"retry_after": 50.0},
        why="draft-ietf-httpapi-ratelimit-headers: t is the reset of the exhausted policy",
    ),
    Case(
        "httpx: the earlier drafts' RateLimit: limit=100, remaining=0, reset=50 waits 50 s",
        _httpx("ratelimit-structured-draft"),
        T.RATE_LIMITED,
        {"retry_after": 50.0},
    ),
    Case(
        "httpx: Retry-After 3 beats the body's retry_after 40",
        _httpx("header-and-body-retry-after"),
        T.RATE_LIMITED,
        {"retry_after": 3.0},
        why="the header is the protocol's own say; a body is read only when no header speaks",
    ),
    Case(
        "google-api-core: a JSON error's RetryInfo (retryDelay 30s) waits 30 s",
        _google_http("google-retry-info"),
        T.RATE_LIMITED,
        {"retry_after": 30.0, "status_code": 429},
        why="google.rpc.RetryInfo in error.details, as Google's JSON APIs send quota errors",
    ),
    Case(
        "google-api-core: a gRPC status's RetryInfo detail waits 30 s",
        _google_grpc_retry_info,
        T.RATE_LIMITED,
        {"retry_after": 30.0, "provider_code": "RESOURCE_EXHAUSTED"},
        why="the RetryInfo message google-api-core unpacks from grpc-status-details-bin",
    ),
]
