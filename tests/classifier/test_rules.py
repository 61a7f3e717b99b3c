"""The rules tables as their lookups read them, and the retryable set derived from them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from classifier import RETRYABLE, Failure, FailureCategory, rules

T = FailureCategory


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("Throttling", T.RATE_LIMITED),  # an exact entry
        ("BandwidthLimitExceeded", T.RATE_LIMITED),
        ("UNAVAILABLE", T.TRANSIENT),  # a gRPC status name is a code too
        ("ThrottlingException.Foo", T.RATE_LIMITED),  # the "Throttling" prefix
        ("ExpiredTokenException", T.AUTH_FAILURE),  # the "ExpiredToken" prefix
        ("NoSuchBucket", T.RESOURCE_MISSING),
        ("InvalidParameterValue", T.INVALID_INPUT),
        ("DBInstanceNotFound", T.RESOURCE_MISSING),  # the "NotFound" suffix
        ("InvalidInstanceID.NotFound", T.RESOURCE_MISSING),  # suffixes before prefixes
        ("CustomerLimitExceeded", T.RATE_LIMITED),
        ("invalid_request_error", None),  # generic: never a specific code
        ("Invalid" + "x" * 200, None),  # too long for the suffix and prefix families
        ("", None),
    ],
)
def test_provider_codes_are_read_exactly_then_by_suffix_then_by_prefix(
    code: str, expected: T | None
) -> None:
    assert rules.provider_code_category(code) is expected


def table_walk(code: str) -> Any:
    """The provider-code tables walked one entry at a time, in their order."""
    category = rules.PROVIDER_CODES.get(code) or rules.GRPC_STATUS.get(code)
    if category is not None or len(code) > 128:
        return category
    for suffix, category in rules.PROVIDER_CODE_SUFFIXES:
        if code.endswith(suffix):
            return category
    for prefix, category in rules.PROVIDER_CODE_PREFIXES:
        if code.startswith(prefix):
            return category
    return None


AFFIXES = [affix for affix, _ in (*rules.PROVIDER_CODE_SUFFIXES, *rules.PROVIDER_CODE_PREFIXES)]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(AFFIXES), st.text(max_size=6)), max_size=3).map("".join))
def test_provider_codes_match_the_tables_in_order(code: str) -> None:
    assert rules.provider_code_category(code) is table_walk(code)


def test_the_retryable_set_holds_the_categories_a_retry_can_help() -> None:
    # UNCLASSIFIED is retryable: "at most once, then ask a human" is the routing policy's call.
    assert {T.TRANSIENT, T.RATE_LIMITED, T.TIMEOUT, T.SERVER_FAULT, T.UNCLASSIFIED} == RETRYABLE
    assert isinstance(RETRYABLE, frozenset)


@pytest.mark.parametrize("category", list(T))
def test_a_failure_without_a_say_on_retrying_takes_its_category_default(category: T) -> None:
    assert Failure.from_dict({"category": category.value}).retryable is (category in RETRYABLE)
