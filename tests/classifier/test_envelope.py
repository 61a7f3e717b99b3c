"""The envelope (error and success, valid-empty included) and classifying described errors."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from classifier import Failure, FailureCategory, Signal
from classifier.described import classify_description
from classifier.envelope import (
    ENVELOPE_KEYS,
    error_envelope,
    failure_from_envelope,
    success_envelope,
)

T = FailureCategory


def roundtrip(data: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(data, allow_nan=False))


def read_timeout() -> httpx.ReadTimeout:
    return httpx.ReadTimeout("read timed out", request=httpx.Request("GET", "https://x.test"))


def test_an_error_envelope_keeps_what_was_attempted_gathered_and_possible() -> None:
    envelope = error_envelope(
        read_timeout(),
        attempted={"operation": "web_search", "query": "AI impact on film production 2024"},
        partial_results=[{"url": "https://a.test", "excerpt": "…"}],
        alternatives=["retry with narrower query", "use news_api instead of web crawl"],
    )
    assert set(ENVELOPE_KEYS) <= set(envelope)
    assert envelope["status"] == "error"
    assert envelope["failure_type"] == "timeout"
    assert envelope["retryable"] is True
    assert envelope["attempted"]["operation"] == "web_search"
    assert envelope["partial_results"] == [{"url": "https://a.test", "excerpt": "…"}]
    assert envelope["alternatives"][1] == "use news_api instead of web crawl"
    assert envelope["detail"] == "ReadTimeout: read timed out"
    assert envelope["results"] == []
    assert envelope["exception_type"] == "httpx.ReadTimeout"
    assert roundtrip(envelope) == envelope


def test_an_empty_result_is_a_success_with_zero_items() -> None:
    envelope = success_envelope([], attempted={"operation": "news_api", "query": "film"})
    assert envelope["status"] == "ok"
    assert envelope["failure_type"] is None
    assert envelope["results"] == []
    assert set(ENVELOPE_KEYS) <= set(envelope)
    assert roundtrip(envelope) == envelope
    assert failure_from_envelope(envelope) is None


def test_values_json_cannot_hold_are_converted() -> None:
    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no")

    envelope = error_envelope(
        TimeoutError("t"),
        attempted={"ids": (1, 2), "tags": {"b", "a"}, 3: b"\xffraw", "score": float("nan")},
        partial_results=[{"weird": Unprintable(), "nested": [[[]]]}],
        alternatives=[Unprintable()],
    )
    assert envelope["attempted"] == {
        "ids": [1, 2],
        "tags": ["a", "b"],
        "3": "\ufffdraw",
        "score": None,
    }
    assert envelope["partial_results"][0]["weird"].startswith("<unprintable")
    assert roundtrip(envelope) == envelope


def test_a_self_referencing_partial_result_is_cut() -> None:
    loop: dict[str, Any] = {}
    loop["self"] = loop
    envelope = error_envelope(TimeoutError("t"), partial_results=[loop])
    assert roundtrip(envelope) == envelope


def test_an_error_envelope_gives_its_failure_back() -> None:
    request = httpx.Request("GET", "https://x.test")
    response = httpx.Response(429, headers={"Retry-After": "3"}, request=request)
    envelope = roundtrip(
        error_envelope(httpx.HTTPStatusError("429", request=request, response=response))
    )
    failure = failure_from_envelope(envelope)
    assert isinstance(failure, Failure)
    assert (failure.category, failure.retry_after, failure.status_code, failure.signal) == (
        T.RATE_LIMITED,
        3.0,
        429,
        Signal.STATUS,
    )


@pytest.mark.parametrize("envelope", [{}, {"failure_type": "flaky"}, None, [], {"chain": 3}])
def test_a_malformed_envelope_gives_an_unclassified_failure(envelope: Any) -> None:
    failure = failure_from_envelope(envelope)
    assert failure is not None and failure.category is T.UNCLASSIFIED


@pytest.mark.parametrize(
    ("data", "category", "signal"),
    [
        ({"exception_type": "ConnectionResetError", "message": "reset"}, T.TRANSIENT, "type"),
        ({"exception_type": "builtins.TimeoutError"}, T.TIMEOUT, "type"),
        ({"exception_type": "httpx.ReadTimeout"}, T.TIMEOUT, "type"),
        ({"exception_type": "requests.ConnectionError"}, T.TRANSIENT, "type"),
        ({"status_code": 503}, T.SERVER_FAULT, "status"),
        ({"status_code": "429"}, T.RATE_LIMITED, "status"),
        (
            {"status_code": 400, "provider_code": "ThrottlingException"},
            T.RATE_LIMITED,
            "provider_code",
        ),
        ({"provider_code": "ExpiredTokenException"}, T.AUTH_FAILURE, "provider_code"),
        ({"grpc_status": "DEADLINE_EXCEEDED"}, T.TIMEOUT, "status"),
        ({"exception_type": "SearchError", "message": "Read timed out"}, T.TIMEOUT, "message"),
        ({"exception_type": "ValueError", "message": "bad"}, T.UNCLASSIFIED, "none"),
        ({}, T.UNCLASSIFIED, "none"),
    ],
)
def test_described_errors_follow_the_same_rules(
    data: dict[str, Any], category: T, signal: str
) -> None:
    failure = classify_description(data)
    assert (failure.category, failure.signal) == (category, signal)


def test_a_described_wrapper_takes_its_described_cause() -> None:
    failure = classify_description(
        {
            "exception_type": "ToolError",
            "message": "search failed",
            "cause": {
                "exception_type": "openai.RateLimitError",
                "status_code": 429,
                "provider_code": "insufficient_quota",
                "headers": {"retry-after": "5"},
            },
        }
    )
    assert (failure.category, failure.retryable, failure.provider_code) == (
        T.AUTH_FAILURE,
        False,
        "insufficient_quota",
    )
    assert failure.chain == ("ToolError: search failed", "openai.RateLimitError: ")


def test_a_described_rate_limit_reads_its_headers() -> None:
    failure = classify_description({"status_code": 429, "headers": {"Retry-After": "5"}})
    assert failure.retry_after == 5.0


@pytest.mark.parametrize(
    "data",
    [
        None,
        3,
        "text",
        [],
        {"status_code": object()},
        {"cause": "x"},
        {"headers": 5},
        {"exception_type": 7, "message": None},
        {"status_code": 10**100},
    ],
)
def test_a_description_of_any_shape_never_raises(data: Any) -> None:
    assert classify_description(data).category in set(T)


def test_a_cyclic_description_is_walked_once() -> None:
    data: dict[str, Any] = {"exception_type": "ToolError"}
    data["cause"] = data
    assert len(classify_description(data).chain) == 1
