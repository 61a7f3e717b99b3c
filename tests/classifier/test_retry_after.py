"""parse_retry_after: every header form, every kind of header map, garbage and the past."""

from __future__ import annotations

import email.message
from datetime import UTC, datetime
from typing import Any

import pytest

from classifier import parse_retry_after
from classifier.retry_after import MAX_RETRY_AFTER, delay_from_body, retry_info_delay

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


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('"default";r=0;t=50', 50.0),
        ("limit=100, remaining=0, reset=50", 50.0),
        ("limit=100;remaining=0;reset=50", 50.0),
        ('"daily";r=3;t=3600, "burst";r=0;t=5', 5.0),  # only the exhausted policy's reset
        ('"daily";r=0;t=3600, "burst";r=0;t=5', 3600.0),  # both spent: the longer wait
        ('"default";t=9', 9.0),  # nothing said of what remains
        ('"default";r=7;t=30', None),  # quota left: this policy is not why
        ('"default";r=0;t=soon', None),
        ("", None),
    ],
)
def test_it_reads_the_ietf_ratelimit_field(value: str, expected: float | None) -> None:
    assert parse_retry_after({"RateLimit": value}, now=NOW) == expected


def test_ratelimit_reset_beats_the_structured_field() -> None:
    headers = {"RateLimit": '"default";r=0;t=50', "RateLimit-Reset": "7"}
    assert parse_retry_after(headers, now=NOW) == 7.0


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"message": "You are being rate limited.", "retry_after": 64.57}, 64.57),
        ({"retryAfter": "4.5"}, 4.5),
        ({"error": {"retry_after_ms": 1500}}, 1.5),
        ({"retry_after_ms": 250, "retry_after": 9}, 0.25),  # milliseconds first, as headers
        (b'{"error": {"retryAfter": 12}}', 12.0),
        ('{"retry_after": 3}', 3.0),
        (
            {
                "error": {
                    "details": [
                        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1.5s"}
                    ]
                }
            },
            1.5,
        ),
        (
            {
                "error": {
                    "details": [
                        {"@type": "x.ErrorInfo"},
                        {"@type": "google.rpc.RetryInfo", "retryDelay": "30s"},
                    ]
                }
            },
            30.0,
        ),
        ({"retry_after": -1}, None),
        ({"retry_after": True}, None),
        ({"retry_after": 10**9}, MAX_RETRY_AFTER),
        ("not json", None),
        (b"{" + b" " * 70_000 + b"}", None),  # too large to parse
        ({"details": [{"@type": "google.rpc.RetryInfo", "retryDelay": "soon"}]}, None),
        ([1, 2], None),
    ],
)
def test_it_reads_a_delay_from_an_error_body(body: Any, expected: float | None) -> None:
    assert delay_from_body(body) == expected


def test_a_retry_info_delay_is_read_from_protobuf_messages_too() -> None:
    from datetime import timedelta

    from google.protobuf import duration_pb2
    from google.rpc import error_details_pb2

    message = error_details_pb2.RetryInfo(
        retry_delay=duration_pb2.Duration(seconds=2, nanos=500_000_000)
    )
    assert retry_info_delay([message]) == 2.5

    class RetryInfo:  # proto-plus hands a Duration over as a timedelta
        retry_delay = timedelta(seconds=30)

    assert retry_info_delay([RetryInfo()]) == 30.0
