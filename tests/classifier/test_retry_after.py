"""parse_retry_after: every header form, every kind of header map, garbage and the past."""

from __future__ import annotations

import email.message
from datetime import UTC, datetime
from typing import Any

import pytest

from classifier import parse_retry_after
from classifier.retry_after import MAX_RETRY_AFTER

NOW = 1_700_000_000.0  # 2023-11-14T22:13:20Z
HTTP_DATE_IN_30_S = "Tue, 14 Nov 2023 22:13:50 GMT"


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "120"}, 120.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"RETRY-AFTER": "0"}, 0.0),
        ({"Retry-After": HTTP_DATE_IN_30_S}, 30.0),
        ({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),
        ({"retry-after-ms": "250"}, 0.25),
        ({"x-ms-retry-after-ms": "1000"}, 1.0),
        ({"RateLimit-Reset": "9"}, 9.0),
        ({"X-RateLimit-Reset": str(int(NOW) + 60)}, 60.0),
        ({"X-RateLimit-Reset": str(int(NOW) - 60)}, 0.0),
        ({"X-RateLimit-Reset": str(int(NOW * 1000) + 5000)}, 5.0),
        ({"X-RateLimit-Reset": "12"}, 12.0),
        ({"x-ratelimit-reset-requests": "6m0s"}, 360.0),
        ({"x-ratelimit-reset-requests": "1.5s"}, 1.5),
        ({"x-ratelimit-reset-tokens": "20ms"}, 0.02),
        ({"x-ratelimit-reset-tokens": "1h2m3s"}, 3723.0),
        ({"x-ratelimit-reset-requests": "2s", "x-ratelimit-reset-tokens": "1m"}, 60.0),
        ({"Retry-After": str(10**12)}, MAX_RETRY_AFTER),
        ({"Retry-After": 7}, 7.0),
        ({b"Retry-After": b"8"}, 8.0),
    ],
)
def test_it_reads_every_form(headers: dict[Any, Any], expected: float) -> None:
    assert parse_retry_after(headers, now=NOW) == pytest.approx(expected)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Content-Type": "application/json"},
        {"Retry-After": "soon"},
        {"Retry-After": "-5"},
        {"Retry-After": "nan"},
        {"Retry-After": "inf"},
        {"Retry-After": ""},
        {"Retry-After": "Fri, 99 Foo 2024 99:99:99 GMT"},
        {"retry-after-ms": "-1"},
        {"x-ratelimit-reset-requests": "6 minutes"},
        {"Retry-After": float("nan")},
        {"Retry-After": -3},
        {"Retry-After": None},
        {"Retry-After": object()},
        None,
        "Retry-After: 5",
        42,
    ],
)
def test_garbage_gives_none(headers: Any) -> None:
    assert parse_retry_after(headers, now=NOW) is None


def test_precedence_is_ms_then_retry_after_then_ratelimit_reset_then_x_reset() -> None:
    headers = {
        "x-ratelimit-reset-requests": "6m0s",
        "X-RateLimit-Reset": "50",
        "RateLimit-Reset": "40",
        "Retry-After": "30",
        "retry-after-ms": "20000",
    }
    assert parse_retry_after(headers, now=NOW) == 20.0
    del headers["retry-after-ms"]
    assert parse_retry_after(headers, now=NOW) == 30.0
    del headers["Retry-After"]
    assert parse_retry_after(headers, now=NOW) == 40.0
    del headers["RateLimit-Reset"]
    assert parse_retry_after(headers, now=NOW) == 50.0
    del headers["X-RateLimit-Reset"]
    assert parse_retry_after(headers, now=NOW) == 360.0


def test_garbage_in_a_stronger_header_falls_through_to_the_next() -> None:
    assert parse_retry_after({"Retry-After": "later", "RateLimit-Reset": "4"}, now=NOW) == 4.0


def test_now_may_be_a_datetime() -> None:
    now = datetime.fromtimestamp(NOW, tz=UTC)
    assert parse_retry_after({"Retry-After": HTTP_DATE_IN_30_S}, now=now) == 30.0
    naive = now.replace(tzinfo=None)
    assert parse_retry_after({"Retry-After": HTTP_DATE_IN_30_S}, now=naive) == 30.0


def test_it_reads_the_header_maps_of_real_libraries() -> None:
    import httpx
    import requests.structures
    from multidict import CIMultiDict, CIMultiDictProxy

    message = email.message.Message()
    message["Retry-After"] = "3"
    maps: list[Any] = [
        httpx.Headers({"Retry-After": "3"}),
        requests.structures.CaseInsensitiveDict({"Retry-After": "3"}),
        CIMultiDictProxy(CIMultiDict({"Retry-After": "3"})),
        message,
        [("Retry-After", "3")],
        [(b"retry-after", b"3")],
    ]
    for headers in maps:
        assert parse_retry_after(headers, now=NOW) == 3.0, type(headers)


def test_a_header_map_that_raises_midway_gives_what_it_read() -> None:
    class Exploding:
        def items(self) -> Any:
            yield ("Retry-After", "6")
            raise RuntimeError("boom")

    assert parse_retry_after(Exploding(), now=NOW) == 6.0
