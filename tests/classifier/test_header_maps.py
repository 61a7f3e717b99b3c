"""Header maps of every shape give the known rate-limit headers that a plain scan finds."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from requests.structures import CaseInsensitiveDict

from classifier.retry_after import header_values

# The headers a provider uses to say how long to wait, or whether to retry at all.
KNOWN = {
    "retry-after-ms",
    "x-ms-retry-after-ms",
    "retry-after",
    "ratelimit-reset",
    "x-ratelimit-reset",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
    "x-should-retry",
}

PAIRS = [
    [],
    [("Server", "x"), ("Date", "d"), ("Content-Type", "application/json")],
    [("Retry-After", "7"), ("retry-after", "9"), ("X-Should-Retry", "false")],
    [("retry-after-ms", "250"), ("x-ratelimit-reset-requests", "6m0s"), ("RateLimit-Reset", "3")],
    [("X-RateLimit-Reset", "12"), ("x-ratelimit-reset-tokens", "20ms"), ("Server", "y")],
]


class Generic(Mapping[str, Any]):
    """A plain Mapping over another one: only its `.keys()` and `[]` can be read."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getitem__(self, key: str) -> Any:
        return self.inner[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.inner.keys())

    def __len__(self) -> int:
        return len(self.inner)


@pytest.mark.parametrize("pairs", PAIRS)
def test_httpx_headers_read_as_the_generic_scan_reads_them(pairs: list[tuple[str, str]]) -> None:
    headers = httpx.Headers(pairs)
    assert header_values(headers) == header_values(Generic(headers))


@pytest.mark.parametrize("pairs", PAIRS)
def test_requests_headers_read_as_the_generic_scan_reads_them(pairs: list[tuple[str, str]]) -> None:
    headers = CaseInsensitiveDict(dict(pairs))
    assert header_values(headers) == header_values(Generic(headers))


@pytest.mark.parametrize(
    ("pairs", "from_httpx", "from_requests"),
    [
        (PAIRS[1], {}, {}),
        (
            PAIRS[2],
            {"retry-after": "7, 9", "x-should-retry": "false"},  # httpx joins a repeated name
            {"retry-after": "9", "x-should-retry": "false"},  # the dict kept the last one
        ),
        (
            PAIRS[3],
            {"retry-after-ms": "250", "x-ratelimit-reset-requests": "6m0s", "ratelimit-reset": "3"},
            {"retry-after-ms": "250", "x-ratelimit-reset-requests": "6m0s", "ratelimit-reset": "3"},
        ),
        (
            PAIRS[4],
            {"x-ratelimit-reset": "12", "x-ratelimit-reset-tokens": "20ms"},
            {"x-ratelimit-reset": "12", "x-ratelimit-reset-tokens": "20ms"},
        ),
    ],
)
def test_the_client_libraries_header_maps_give_their_known_values(
    pairs: list[tuple[str, str]], from_httpx: dict[str, str], from_requests: dict[str, str]
) -> None:
    assert header_values(httpx.Headers(pairs)) == from_httpx
    assert header_values(CaseInsensitiveDict(dict(pairs))) == from_requests


def test_duplicate_httpx_headers_are_joined_as_httpx_joins_them() -> None:
    headers = httpx.Headers([("Retry-After", "1"), ("retry-after", "2")])
    assert header_values(headers) == {"retry-after": "1, 2"}


def plain_scan(pairs: Any) -> dict[str, Any]:
    """The reference: the first value of each known name, names lowercased by str.lower."""
    found: dict[str, Any] = {}
    for key, value in pairs:
        if isinstance(key, bytes):
            key = key.decode("latin-1")
        if isinstance(key, str) and str.lower(key) in KNOWN:
            found.setdefault(str.lower(key), value)
    return found


class Name(str):
    """A header name whose own lower() lies: names are lowercased with str.lower regardless."""

    def lower(self) -> str:
        return "retry-after"


NAMES = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["Retry-After", "RETRY-AFTER-MS", "x-should-retry", "Server", "Date"]),
    st.binary(max_size=8),
    st.sampled_from([b"retry-after", b"Server", b"X-RateLimit-Reset"]),
    st.sampled_from(["Retry-After", "Server"]).map(Name),
    st.integers(),
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(NAMES, st.text(max_size=5), max_size=8))
def test_a_dict_header_map_is_read_as_its_pairs_are(headers: dict[Any, Any]) -> None:
    assert header_values(headers) == plain_scan(headers.items())


def test_pairs_and_bytes_names_are_read_as_a_map_is() -> None:
    pairs = [(b"Retry-After", b"3"), ("retry-after", "9"), ("Server", "x")]
    assert header_values(pairs) == {"retry-after": b"3"}


def test_a_name_beyond_the_first_256_is_not_looked_at() -> None:
    headers = {f"x-filler-{index}": "1" for index in range(256)}
    headers["Retry-After"] = "5"
    assert header_values(headers) == {}
