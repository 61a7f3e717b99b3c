"""Envelopes and tool results written in other conventions: field aliases and camelCase, failure
types from other vocabularies, MCP results (errorCategory, isRetryable, in either spelling)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from classifier import Classifier, FailureCategory, Overrides, Signal, classify
from classifier.described import classify_description, describe_mcp_result, is_mcp_result
from classifier.envelope import (
    camel_case,
    failure_from_envelope,
    field_names,
    normalise_envelope,
)

T = FailureCategory


def test_field_names_list_the_field_its_aliases_and_their_camel_case():
    assert field_names("alternatives") == (
        "alternatives",
        "alternatives_suggested",
        "suggested_alternatives",
        "alternativesSuggested",
        "suggestedAlternatives",
    )
    assert field_names("retryable") == (
        "retryable",
        "retry_recommended",
        "is_retryable",
        "retryRecommended",
        "isRetryable",
    )
    assert field_names("failure_type") == (
        "failure_type",
        "error_category",
        "failureType",
        "errorCategory",
    )
    assert field_names("partial_results") == ("partial_results", "partialResults")
    assert camel_case("taxonomy_version") == "taxonomyVersion"


def test_an_envelope_in_another_convention_reads_under_our_names():
    written = {
        "status": "error",
        "failureType": "auth_error",
        "attemptedQuery": "AI impact on film",
        "partialResults": [{"url": "https://a.test"}],
        "alternatives_suggested": ["news_api"],
        "retry_recommended": False,
        "retryAfter": 4,
        "x-agent": "kept",
    }
    assert normalise_envelope(written) == {
        "status": "error",
        "failure_type": "auth_failure",
        "attempted": {"query": "AI impact on film"},
        "partial_results": [{"url": "https://a.test"}],
        "alternatives": ["news_api"],
        "retryable": False,
        "retry_after": 4,
        "x-agent": "kept",
    }


def test_the_canonical_name_wins_when_both_are_given():
    read = normalise_envelope({"alternatives_suggested": ["a"], "alternatives": ["b"]})
    assert read == {"alternatives": ["b"]}


def test_a_failure_is_read_back_from_an_aliased_envelope():
    failure = failure_from_envelope(
        {"status": "error", "failure_type": "rate_limit", "retryAfter": 3, "statusCode": 429}
    )
    assert failure is not None
    assert (failure.category, failure.retry_after, failure.status_code) == (
        T.RATE_LIMITED,
        3.0,
        429,
    )
    assert failure_from_envelope({"status": "ok", "failureType": None}) is None


# ---------------------------------------------------------------------------------------------
# Described errors that name their own category, and MCP results


def test_a_stated_failure_type_decides_with_its_own_retry_default():
    failure = classify_description({"status_code": 503, "failure_type": "auth_error"})
    assert (failure.category, failure.retryable, failure.signal) == (
        T.AUTH_FAILURE,
        False,
        Signal.PROVIDER_CODE,
    )
    assert failure.provider_code == "auth_error" and failure.status_code == 503


def test_an_operators_override_outranks_a_stated_failure_type():
    overrides = Overrides.from_data(
        [{"match_on": "status_code", "match_value": "503", "failure_type": "rate_limited"}]
    )
    failure = classify_description(
        {"status_code": 503, "failure_type": "auth_error"},
        classifier=Classifier(overrides=overrides),
    )
    assert failure.category is T.RATE_LIMITED


def test_an_unknown_stated_type_is_ignored_by_the_pure_reader():
    # The API refuses it with a 422 first; the pure function only has to be safe.
    assert classify_description({"status_code": 404, "failure_type": "zzz"}).category is (
        T.RESOURCE_MISSING
    )


MCP_CASES = [
    (
        {
            "isError": True,
            "content": [{"type": "text", "text": "token expired"}],
            "structuredContent": {"errorCategory": "auth_error", "isRetryable": False},
        },
        T.AUTH_FAILURE,
        False,
        None,
    ),
    (
        {
            "is_error": True,
            "content": [],
            "structured_content": {"error": {"error_category": "rate_limit", "retry_after": 5}},
        },
        T.RATE_LIMITED,
        True,
        5.0,
    ),
    (
        {"isError": True, "errorCategory": "server_error", "isRetryable": False, "code": 503},
        T.SERVER_FAULT,
        False,
        None,
    ),
    (
        {"isError": True, "_meta": {"errorCategory": "not_found"}, "content": []},
        T.RESOURCE_MISSING,
        False,
        None,
    ),
    (
        {"isError": True, "structuredContent": {"code": 429, "retryAfter": "7"}},
        T.RATE_LIMITED,
        True,
        7.0,
    ),
]


@pytest.mark.parametrize(("result", "category", "retryable", "delay"), MCP_CASES)
def test_an_mcp_result_is_read_in_either_spelling(result, category, retryable, delay):
    assert is_mcp_result(result)
    failure = classify_description(describe_mcp_result(result))
    assert (failure.category, failure.retryable, failure.retry_after) == (
        category,
        retryable,
        delay,
    )


def test_an_mcp_result_saying_a_retry_cannot_help_is_not_retryable_even_for_a_5xx():
    result = {"isError": True, "structuredContent": {"code": 503, "isRetryable": False}}
    failure = classify_description(describe_mcp_result(result))
    assert (failure.category, failure.retryable) == (T.SERVER_FAULT, False)


@pytest.mark.parametrize(
    "result", [{"isError": True, "content": "x"}, {"isError": True, "_meta": 3}]
)
def test_a_malformed_mcp_result_never_raises(result: dict[str, Any]):
    described = describe_mcp_result(result)
    assert described["exception_type"] == "mcp.ToolError"
    assert classify_description(described).category in set(T)


def test_a_real_exception_and_its_description_agree():
    request = httpx.Request("GET", "https://x.test")
    response = httpx.Response(501, request=request)
    described = {"exception_type": "httpx.HTTPStatusError", "status_code": 501}
    real = classify(httpx.HTTPStatusError("501", request=request, response=response))
    failure = classify_description(described)
    assert (real.category, real.retryable) == (failure.category, failure.retryable)
    assert failure.retryable is False  # 501: the server will never implement it on a retry
