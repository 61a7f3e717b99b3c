"""Overrides: registered provider-specific rules, consulted before the core rules."""

from __future__ import annotations

import httpx
import pytest

from classifier import Classifier, FailureCategory, MatchOn, Overrides, Signal, classify

T = FailureCategory


def http_error(status: int, body: dict | None = None) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "https://api.example.test/")
    response = httpx.Response(status, json=body or {}, request=request)
    return httpx.HTTPStatusError(f"status {status}", request=request, response=response)


class VendorTokenExpired(Exception):
    pass


SNAPSHOT = [
    {
        "provider": "",
        "match_on": "status_code",
        "match_value": "498",
        "failure_type": "auth_failure",
        "retryable": None,
        "note": "token expired",
        "enabled": True,
    },
    {
        "provider": "twitter",
        "match_on": "status_code",
        "match_value": "420",
        "failure_type": "rate_limited",
        "retryable": True,
        "note": "enhance your calm",
        "enabled": True,
    },
    {
        "provider": "acme",
        "match_on": "exception_type",
        "match_value": "VendorTokenExpired",
        "failure_type": "auth_failure",
        "retryable": False,
        "note": "",
        "enabled": True,
    },
    {
        "provider": "",
        "match_on": "provider_code",
        "match_value": "quota_*",
        "failure_type": "rate_limited",
        "retryable": False,
        "note": "",
        "enabled": True,
    },
    {
        "provider": "",
        "match_on": "status_code",
        "match_value": "404",
        "failure_type": "server_fault",
        "retryable": None,
        "note": "disabled rows do nothing",
        "enabled": False,
    },
]


@pytest.fixture
def classifier() -> Classifier:
    return Classifier(overrides=Overrides.from_data(SNAPSHOT))


def test_a_global_status_override_maps_498_to_auth_failure(classifier: Classifier) -> None:
    assert classify(http_error(498)).category is T.INVALID_INPUT  # core rule: an unknown 4xx
    failure = classifier.classify(http_error(498))
    assert (failure.category, failure.signal, failure.retryable) == (
        T.AUTH_FAILURE,
        Signal.STATUS,
        False,
    )


def test_a_scoped_override_applies_only_to_its_provider(classifier: Classifier) -> None:
    assert classifier.classify(http_error(420)).category is T.INVALID_INPUT
    assert classifier.classify(http_error(420), provider="Twitter").category is T.RATE_LIMITED
    scoped = Classifier(overrides=classifier.overrides, provider="twitter")
    assert scoped.classify(http_error(420)).category is T.RATE_LIMITED


def test_an_exception_type_override_matches_by_bare_name_in_the_chain(
    classifier: Classifier,
) -> None:
    try:
        try:
            raise VendorTokenExpired("expired")
        except VendorTokenExpired as exc:
            raise RuntimeError("tool failed") from exc
    except RuntimeError as outer:
        failure = classifier.classify(outer, provider="acme")
    assert failure.category is T.AUTH_FAILURE
    assert failure.signal is Signal.TYPE
    assert failure.exception_type.endswith("VendorTokenExpired")


def test_a_provider_code_prefix_override_sets_retryable(classifier: Classifier) -> None:
    exc = http_error(429)
    exc.body = {"error": {"code": "QUOTA_daily"}}  # type: ignore[attr-defined]
    failure = classifier.classify(exc)
    assert (failure.category, failure.retryable) == (T.RATE_LIMITED, False)


def test_disabled_rows_are_ignored(classifier: Classifier) -> None:
    assert classifier.classify(http_error(404)).category is T.RESOURCE_MISSING


def test_invalid_rows_are_rejected_with_a_reason() -> None:
    rows = [
        {"match_on": "status_code", "match_value": "abc", "failure_type": "timeout"},
        {"match_on": "colour", "match_value": "x", "failure_type": "timeout"},
        {"match_on": "status_code", "match_value": "500", "failure_type": "flaky"},
        "not a row",
    ]
    overrides = Overrides.from_data(rows)
    assert len(overrides) == 0
    assert len(overrides.rejected) == 4
    with pytest.raises(ValueError, match="invalid override row"):
        Overrides.from_data(rows, strict=True)


def test_rules_can_be_added_explicitly() -> None:
    overrides = Overrides()
    overrides.add(MatchOn.PROVIDER_CODE, "ENHANCE_YOUR_CALM", "rate_limited")
    exc = RuntimeError("calm down")
    exc.code = "enhance_your_calm"  # type: ignore[attr-defined]
    assert Classifier(overrides=overrides).classify(exc).category is T.RATE_LIMITED
    assert classify(exc).category is T.UNCLASSIFIED  # the core rules stay untouched
