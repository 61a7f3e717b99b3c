"""The header maps read through their own storage give what the generic `.keys()` scan gives."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest
from requests.structures import CaseInsensitiveDict

from classifier.retry_after import header_values

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


def test_duplicate_httpx_headers_are_joined_as_httpx_joins_them() -> None:
    headers = httpx.Headers([("Retry-After", "1"), ("retry-after", "2")])
    assert header_values(headers) == {"retry-after": "1, 2"}
