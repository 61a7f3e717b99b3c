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
        ("InvalidParameterValue", None),  # generic: "Invalid" decides only without a status
        ("InvalidIdentityToken", T.AUTH_FAILURE),  # an exact entry before the generic prefix
        ("DBInstanceNotFound", T.RESOURCE_MISSING),  # the "NotFound" suffix
        ("InvalidInstanceID.NotFound", T.RESOURCE_MISSING),  # suffixes before prefixes
        ("CustomerLimitExceeded", T.RATE_LIMITED),
        ("QueueDoesNotExist", T.RESOURCE_MISSING),  # SQS's own name for a missing queue
        ("AWS.SimpleQueueService.NonExistentQueue", T.RESOURCE_MISSING),  # the last part
        ("com.amazonaws.kms#NotFoundException", T.RESOURCE_MISSING),
        ("KMS.NotFoundException", T.RESOURCE_MISSING),
        ("KMSAccessDeniedException", T.AUTH_FAILURE),  # Lambda's, sent as a 502
        ("UserNotFoundException", T.RESOURCE_MISSING),  # the "NotFoundException" suffix
        ("ResourceGroupNotFound", T.RESOURCE_MISSING),  # Azure
        ("AuthorizationFailed", T.AUTH_FAILURE),  # Azure
        ("invalid_request_error", None),  # generic: never a specific code
        ("Invalid" + "x" * 200, None),  # too long for the suffix and prefix families
        ("", None),
    ],
)
def test_provider_codes_are_read_exactly_then_by_suffix_then_by_prefix(
    code: str, expected: T | None
) -> None:
    assert rules.provider_code_category(code) is expected


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("InvalidParameterValue", T.INVALID_INPUT),
        ("InvalidParameterCombination", T.INVALID_INPUT),
        ("MalformedQueryString", T.INVALID_INPUT),
        ("invalid_request_error", T.INVALID_INPUT),
        ("api_error", T.SERVER_FAULT),
        ("NoSuchKey", None),  # specific: never a generic code
    ],
)
def test_generic_codes_are_read_by_their_own_table(code: str, expected: T | None) -> None:
    assert rules.generic_code_category(code) is expected


def table_walk(code: str) -> Any:
    """The provider-code tables walked one entry at a time, in their order."""
    category = rules.PROVIDER_CODES.get(code) or rules.GRPC_STATUS.get(code)
    if category is not None or len(code) > 128:
        return category
    for separator in rules.CODE_NAMESPACE_SEPARATORS:
        if separator in code and code.rpartition(separator)[2] in rules.PROVIDER_CODES:
            return rules.PROVIDER_CODES[code.rpartition(separator)[2]]
    for suffix, category in rules.PROVIDER_CODE_SUFFIXES:
        if code.endswith(suffix):
            return category
    for prefix, category in rules.PROVIDER_CODE_PREFIXES:
        if code.startswith(prefix):
            return category
    for infix, category in rules.PROVIDER_CODE_INFIXES:
        if infix in code:
            return category
    return None


AFFIXES = [
    affix
    for affix, _ in (
        *rules.PROVIDER_CODE_SUFFIXES,
        *rules.PROVIDER_CODE_PREFIXES,
        *rules.PROVIDER_CODE_INFIXES,
    )
]
PIECES = [*AFFIXES, *rules.CODE_NAMESPACE_SEPARATORS, "NotFoundException", "QueueDoesNotExist"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)), max_size=3).map("".join))
def test_provider_codes_match_the_tables_in_order(code: str) -> None:
    assert rules.provider_code_category(code) is table_walk(code)


def test_the_retryable_set_holds_the_categories_a_retry_can_help() -> None:
    # UNCLASSIFIED is retryable: "at most once, then ask a human" is the routing policy's call.
    assert {T.TRANSIENT, T.RATE_LIMITED, T.TIMEOUT, T.SERVER_FAULT, T.UNCLASSIFIED} == RETRYABLE
    assert isinstance(RETRYABLE, frozenset)


@pytest.mark.parametrize("category", list(T))
def test_a_failure_without_a_say_on_retrying_takes_its_category_default(category: T) -> None:
    assert Failure.from_dict({"category": category.value}).retryable is (category in RETRYABLE)
