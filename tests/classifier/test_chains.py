"""Chains (wrapped, double-wrapped, cyclic, deep, groups) and exceptions with no signal at all."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from classifier import FailureCategory, Signal, classify

T = FailureCategory


class ToolError(Exception):
    """What an agent's tool wrapper raises: no signal of its own."""


def raised_from(outer: BaseException, inner: BaseException) -> BaseException:
    """Return `outer` after `raise outer from inner`, as an agent's wrapper would do it."""
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer from exc
    except BaseException as wrapped:
        return wrapped


def raised_during(outer: BaseException, inner: BaseException) -> BaseException:
    """Return `outer` raised while handling `inner` (implicit __context__)."""
    try:
        try:
            raise inner
        except BaseException:
            raise outer  # noqa: B904 - the implicit context is the point
    except BaseException as wrapped:
        return wrapped


def http_error(status: int, headers: dict[str, str] | None = None) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "https://api.example.test/search")
    response = httpx.Response(status, headers=headers or {}, request=request)
    return httpx.HTTPStatusError(f"status {status}", request=request, response=response)


def read_timeout() -> httpx.ReadTimeout:
    return httpx.ReadTimeout("read timed out", request=httpx.Request("GET", "https://x.test"))


def test_a_wrapper_without_signal_takes_its_causes_signal() -> None:
    failure = classify(raised_from(ToolError("search failed"), read_timeout()))
    assert failure.category is T.TIMEOUT
    assert failure.exception_type == "httpx.ReadTimeout"
    assert failure.signal is Signal.TYPE
    assert failure.chain == (
        "tests.classifier.test_chains.ToolError: search failed",
        "httpx.ReadTimeout: read timed out",
    )
    assert failure.detail == "ToolError: search failed (caused by ReadTimeout: read timed out)"


def test_a_double_wrapped_status_error_is_found() -> None:
    inner = raised_from(ToolError("fetch failed"), http_error(429, {"Retry-After": "5"}))
    failure = classify(raised_during(RuntimeError("agent step failed"), inner))
    assert failure.category is T.RATE_LIMITED
    assert failure.retry_after == 5.0
    assert failure.status_code == 429
    assert len(failure.chain) == 3


def test_an_outer_status_beats_a_weaker_inner_type() -> None:
    failure = classify(raised_during(http_error(503), ConnectionResetError(104, "reset")))
    assert failure.category is T.SERVER_FAULT
    assert failure.exception_type == "httpx.HTTPStatusError"


def test_an_inner_status_beats_an_outer_message() -> None:
    outer = RuntimeError("connection refused by upstream")
    failure = classify(raised_from(outer, http_error(404)))
    assert failure.category is T.RESOURCE_MISSING
    assert failure.signal is Signal.STATUS


def test_an_outer_type_beats_an_inner_message() -> None:
    failure = classify(raised_from(TimeoutError("deadline"), RuntimeError("access denied")))
    assert failure.category is T.TIMEOUT


def test_a_generic_transient_wrapper_yields_to_a_more_specific_inner_timeout() -> None:
    import requests
    import urllib3

    inner = urllib3.exceptions.ReadTimeoutError(None, "/search", "Read timed out.")
    failure = classify(raised_from(requests.exceptions.ConnectionError("max retries"), inner))
    assert failure.category is T.TIMEOUT


def test_an_exception_that_is_its_own_context_does_not_loop() -> None:
    exc = RuntimeError("loop")
    exc.__context__ = exc
    failure = classify(exc)
    assert failure.category is T.UNCLASSIFIED
    assert failure.chain == ("builtins.RuntimeError: loop",)


def test_a_two_exception_cycle_is_walked_once() -> None:
    first, second = ToolError("a"), TimeoutError("b")
    first.__cause__ = second
    second.__context__ = first
    failure = classify(first)
    assert failure.category is T.TIMEOUT
    assert len(failure.chain) == 2


def test_a_very_deep_chain_is_cut_without_recursion() -> None:
    exc: BaseException = ConnectionResetError("bottom")
    for level in range(5000):
        wrapper = ToolError(f"level {level}")
        wrapper.__cause__ = exc
        exc = wrapper
    failure = classify(exc)
    assert failure.category is T.UNCLASSIFIED  # the signal lies deeper than the walk goes
    assert len(failure.chain) <= 32


def test_a_cause_reached_through_a_library_link_attribute_counts() -> None:
    import urllib.error

    failure = classify(urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")))
    assert failure.category is T.TRANSIENT
    assert failure.exception_type == "builtins.ConnectionRefusedError"


def test_an_exception_group_takes_its_strongest_member() -> None:
    group = ExceptionGroup("tasks failed", [ValueError("x"), http_error(401)])
    assert classify(group).category is T.AUTH_FAILURE


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("boom"),
        ValueError("bad value in agent code"),
        TypeError("unsupported operand"),
        KeyError("results"),
        IndexError("list index out of range"),
        AttributeError("'NoneType' object has no attribute 'text'"),
        ZeroDivisionError("division by zero"),
        AssertionError(),
        Exception(),
        ToolError("the tool failed"),
        NotImplementedError("later"),
        json.JSONDecodeError("Expecting value", "<html>", 0),
        ModuleNotFoundError("No module named 'x'"),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
        OSError("generic OS error"),
        SystemExit(500),
        KeyboardInterrupt(),
        http_error(302),
    ],
    ids=lambda exc: f"{type(exc).__name__} stays unclassified",
)
def test_exceptions_without_a_signal_stay_unclassified(exc: BaseException) -> None:
    failure = classify(exc)
    assert failure.category is T.UNCLASSIFIED
    assert failure.signal is Signal.NONE
    assert failure.retryable is True  # "at most once" is the routing policy's call
    assert failure.detail


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("upstream said: rate limit exceeded", T.RATE_LIMITED),
        ("Operation timed out after 30000 ms", T.TIMEOUT),
        ("Connection refused by peer", T.TRANSIENT),
        ("403 Forbidden: access denied", T.AUTH_FAILURE),
        ("object does not exist", T.RESOURCE_MISSING),
        ("the service is overloaded", T.SERVER_FAULT),
    ],
)
def test_messages_decide_only_when_nothing_else_does(message: str, expected: T) -> None:
    failure = classify(ToolError(message))
    assert failure.category is expected
    assert failure.signal is Signal.MESSAGE


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("VendorThrottledError", T.RATE_LIMITED),
        ("SearchTimeoutError", T.TIMEOUT),
        ("DocumentNotFound", T.RESOURCE_MISSING),
        ("InvalidTokenError", T.AUTH_FAILURE),
        ("PayloadValidationFailed", T.INVALID_INPUT),
    ],
)
def test_unknown_classes_are_read_by_name(name: str, expected: T) -> None:
    cls: Any = type(name, (Exception,), {})
    failure = classify(cls("something happened"))
    assert failure.category is expected
    assert failure.signal is Signal.TYPE


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (400, T.INVALID_INPUT),
        (409, T.INVALID_INPUT),
        (412, T.INVALID_INPUT),
        (499, T.INVALID_INPUT),
        (408, T.TIMEOUT),
        (410, T.RESOURCE_MISSING),
        (429, T.RATE_LIMITED),
        (507, T.SERVER_FAULT),
        (529, T.SERVER_FAULT),
    ],
)
def test_unknown_4xx_are_never_transient(status: int, expected: T) -> None:
    assert classify(http_error(status)).category is expected


def test_a_provider_retryable_flag_wins_over_the_category_default() -> None:
    exc = ToolError("quota")
    exc.status_code = 429  # type: ignore[attr-defined]
    exc.retryable = False  # type: ignore[attr-defined]
    failure = classify(exc)
    assert failure.category is T.RATE_LIMITED
    assert failure.retryable is False
    assert failure.retry_after is None


def test_an_exception_retry_after_attribute_is_honoured() -> None:
    exc = ToolError("slow down")
    exc.status_code = "429"  # type: ignore[attr-defined]
    exc.retry_after = 2.5  # type: ignore[attr-defined]
    failure = classify(exc)
    assert (failure.category, failure.status_code, failure.retry_after) == (
        T.RATE_LIMITED,
        429,
        2.5,
    )


def test_a_sqlstate_is_a_provider_code() -> None:
    exc = ToolError("canceling statement due to statement timeout")
    exc.sqlstate = "57014"  # type: ignore[attr-defined]
    failure = classify(exc)
    assert (failure.category, failure.provider_code, failure.signal) == (
        T.TIMEOUT,
        "57014",
        Signal.PROVIDER_CODE,
    )


def test_to_dict_is_json_ready() -> None:
    failure = classify(raised_from(ToolError("x"), http_error(503, {"Retry-After": "3"})))
    data = json.loads(json.dumps(failure.to_dict()))
    assert data["category"] == "server_fault"
    assert data["retry_after"] == 3.0
    assert data["signal"] == "status"
    assert data["chain"][1].startswith("httpx.HTTPStatusError: ")


def test_an_exception_answering_through_getattr_is_read() -> None:
    class Dynamic(Exception):
        def __getattr__(self, name: str) -> Any:
            if name == "status_code":
                return 503
            raise AttributeError(name)

    assert classify(Dynamic("upstream")).category is T.SERVER_FAULT


def test_an_exception_using_slots_is_read() -> None:
    class Slotted(Exception):
        __slots__ = ("status_code",)

    exc = Slotted("x")
    exc.status_code = 404
    assert classify(exc).category is T.RESOURCE_MISSING
