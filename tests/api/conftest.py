"""Fixtures of the API tests."""

from __future__ import annotations

import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def _fresh_rate_limits() -> None:
    # The rate limiter counts in the cache, which outlives a test's database rollback.
    cache.clear()
