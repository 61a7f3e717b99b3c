"""Property tests: classify and parse_retry_after never raise, whatever they are handed."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from requests.structures import CaseInsensitiveDict

from classifier import Failure, FailureCategory, classify, parse_retry_after
from classifier.described import classify_description

ATTRIBUTES = [
    "status_code",
    "status",
    "http_status",
    "code",
    "grpc_status_code",
    "headers",
    "response",
    "body",
    "error_code",
    "type",
    "sqlstate",
    "pgcode",
    "retryable",
    "retry_after",
    "reason",
    "orig",
    "cause",
]


class Hostile:
    """An object whose every attribute read, str() and iteration raises."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no {name} for you")

    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __iter__(self) -> Any:
        raise RuntimeError("no iteration")

    def items(self) -> Any:
        raise RuntimeError("no items")


class RaisingHeaders:
    """A response whose .headers raises."""

    @property
    def headers(self) -> Any:
        raise RuntimeError("headers exploded")

    status_code = 503


class WeirdInt(int):
    def __hash__(self) -> int:
        raise RuntimeError("unhashable int")


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.binary(max_size=20),
    st.sampled_from(
        [
            "429",
            "503",
            "UNAVAILABLE",
            "ThrottlingException",
            "insufficient_quota",
            "6m0s",
            "Wed, 21 Oct 2015 07:28:00 GMT",
            "57014",
            "Throttling.Foo",
        ]
    ),
    st.builds(Hostile),
    st.builds(RaisingHeaders),
    st.builds(WeirdInt, st.integers(min_value=100, max_value=599)),
)
header_maps = st.one_of(
    st.dictionaries(
        st.one_of(
            st.text(max_size=20),
            st.sampled_from(
                [
                    "Retry-After",
                    "retry-after-ms",
                    "X-RateLimit-Reset",
                    "RateLimit-Reset",
                    "x-ratelimit-reset-requests",
                    "x-ratelimit-reset-tokens",
                    "x-should-retry",
                ]
            ),
        ),
        scalars,
        max_size=6,
    ),
    st.lists(st.tuples(st.text(max_size=20), scalars), max_size=6),
    scalars,
)
values = st.recursive(
    st.one_of(scalars, header_maps),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(
                ["error", "code", "type", "Error", "Code", "ResponseMetadata", "HTTPStatusCode"]
            ),
            inner,
            max_size=3,
        ),
    ),
    max_leaves=8,
)


@st.composite
def exceptions(draw: st.DrawFn) -> BaseException:
    base = draw(
        st.sampled_from(
            [
                Exception,
                ValueError,
                ConnectionError,
                TimeoutError,
                OSError,
                KeyError,
                SystemExit,
                BaseException,
            ]
        )
    )
    namespace: dict[str, Any] = {}
    if draw(st.booleans()):
        namespace["__str__"] = lambda self: (_ for _ in ()).throw(RuntimeError("no str"))
    if draw(st.booleans()):
        namespace["__getattr__"] = lambda self, name: (_ for _ in ()).throw(KeyError(name))
    name = draw(st.sampled_from(["Boom", "RateLimitError", "NotFound", "X", "Timeout"]))
    cls = type(name, (base,), namespace)
    exc = cls(draw(st.text(max_size=30)))
    for attribute in draw(st.lists(st.sampled_from(ATTRIBUTES), max_size=5, unique=True)):
        setattr(exc, attribute, draw(values))
    if draw(st.booleans()):
        exc.headers = draw(header_maps)
    if draw(st.booleans()):
        exc.__context__ = exc  # a cycle
    return exc


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exceptions(), st.lists(exceptions(), max_size=3))
def test_classify_never_raises_and_returns_one_of_the_eight(
    exc: BaseException, inner: list[BaseException]
) -> None:
    current = exc
    for wrapped in inner:
        current.__cause__ = wrapped
        current = wrapped
    failure = classify(exc)
    assert isinstance(failure, Failure)
    assert failure.category in set(FailureCategory)
    assert isinstance(failure.retryable, bool)
    assert failure.retry_after is None or 0.0 <= failure.retry_after <= 86_400.0
    assert failure.status_code is None or 100 <= failure.status_code <= 599
    failure.to_dict()


class Response:
    def __init__(self, status_code: Any, headers: Any) -> None:
        self.status_code = status_code
        self.headers = headers


class StatusResponse:
    """aiohttp-style: `status` rather than `status_code`."""

    def __init__(self, status: Any, headers: Any) -> None:
        self.status = status
        self.headers = headers


# Statuses as libraries send them and as they should not: ints in and out of range, text, an
# IntEnum, a bool, None.
STATUSES = st.one_of(
    st.integers(min_value=0, max_value=700),
    st.sampled_from([HTTPStatus.NOT_FOUND, HTTPStatus.TOO_MANY_REQUESTS, True, "503", "4o4", 501]),
    st.none(),
    st.text(max_size=3),
)
# Provider codes: exact entries, suffix and prefix families, generic codes, junk, non-strings.
CODES = st.one_of(
    st.sampled_from(["Throttling", "NoSuchKey", "ExpiredTokenException", "api_error", "X", ""]),
    st.text(max_size=12),
    st.integers(),
    st.none(),
)
RESPONSE_HEADERS = st.one_of(
    header_maps,
    st.lists(
        st.tuples(
            st.sampled_from(["Retry-After", "x-should-retry", "X-Should-Retry", "Server"]),
            st.sampled_from(["3", "true", "false", "soon", "0"]),
        ),
        max_size=3,
    ).map(httpx.Headers),
    st.dictionaries(
        st.sampled_from(["Retry-After", "x-should-retry", "Server", "Date"]),
        st.sampled_from(["3", "true", "false", "soon"]),
        max_size=3,
    ).map(CaseInsensitiveDict),
)
BOTOCORE_REPLIES = st.fixed_dictionaries(
    {
        "Error": st.one_of(st.none(), st.fixed_dictionaries({"Code": CODES}), st.just("?")),
        "ResponseMetadata": st.one_of(
            st.fixed_dictionaries({"HTTPStatusCode": STATUSES, "HTTPHeaders": RESPONSE_HEADERS}),
            st.none(),
        ),
    }
)


@st.composite
def status_errors(draw: st.DrawFn) -> BaseException:
    """Exceptions whose evidence is a `response`: an object, botocore's dict, odd, or None."""
    base = draw(st.sampled_from([Exception, ConnectionError, TimeoutError, RuntimeError]))
    name = draw(st.sampled_from(["HTTPStatusError", "ClientError", "Boom", "RateLimitError"]))
    exc = type(name, (base,), {})(draw(st.text(max_size=30)))
    exc.response = draw(  # type: ignore[attr-defined]
        st.one_of(
            st.none(),
            st.builds(Response, STATUSES, RESPONSE_HEADERS),
            st.builds(StatusResponse, STATUSES, RESPONSE_HEADERS),
            st.builds(RaisingHeaders),
            BOTOCORE_REPLIES,
        )
    )
    if draw(st.booleans()):
        exc.__context__ = draw(exceptions())
    return exc


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(status_errors())
def test_classify_never_raises_on_status_errors_whatever_their_response(
    exc: BaseException,
) -> None:
    failure = classify(exc)
    assert failure.category in set(FailureCategory)
    assert isinstance(failure.retryable, bool)
    assert failure.status_code is None or 100 <= failure.status_code <= 599
    assert failure.retry_after is None or 0.0 <= failure.retry_after <= 86_400.0


@settings(max_examples=300, deadline=None)
@given(header_maps, st.one_of(st.none(), st.floats(min_value=0, max_value=4e9)))
def test_parse_retry_after_never_raises(headers: Any, now: float | None) -> None:
    delay = parse_retry_after(headers, now=now)
    assert delay is None or 0.0 <= delay <= 86_400.0


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.dictionaries(
            st.sampled_from(
                [
                    "exception_type",
                    "message",
                    "status_code",
                    "headers",
                    "provider_code",
                    "grpc_status",
                    "retryable",
                    "retry_after",
                    "sqlstate",
                ]
            ),
            values,
            max_size=6,
        ),
        lambda inner: st.dictionaries(
            st.sampled_from(["cause", "context", "message"]), inner, max_size=2
        ),
        max_leaves=4,
    )
)
def test_classify_description_never_raises(data: Any) -> None:
    assert classify_description(data).category in set(FailureCategory)


def test_an_object_that_is_not_an_exception_is_unclassified() -> None:
    assert classify(Hostile()).category is FailureCategory.UNCLASSIFIED  # type: ignore[arg-type]
    assert classify(None).category is FailureCategory.UNCLASSIFIED  # type: ignore[arg-type]
