"""The names other packages import from the classifier, and the shape of a Failure."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, fields

import pytest


def test_the_public_names_import() -> None:
    from classifier import (  # noqa: F401 - importing them is the test
        RETRYABLE,
        TAXONOMY_VERSION,
        Classifier,
        Failure,
        FailureCategory,
        MatchOn,
        OverrideRule,
        Overrides,
        Signal,
        classify,
        parse_retry_after,
    )
    from classifier.described import classify_description  # noqa: F401
    from classifier.envelope import (  # noqa: F401
        error_envelope,
        failure_envelope,
        success_envelope,
    )
    from classifier.rules import DEFAULT_RETRYABLE  # noqa: F401


def test_a_failure_keeps_its_fields_in_order_and_cannot_change() -> None:
    from classifier import Failure, FailureCategory, Signal

    assert [field.name for field in fields(Failure)] == [
        "category",
        "retryable",
        "retry_after",
        "status_code",
        "provider_code",
        "exception_type",
        "signal",
        "chain",
        "detail",
    ]
    failure = Failure(FailureCategory.SERVER_FAULT, True, detail="failed: boom")
    assert (failure.signal, failure.chain, failure.retry_after) == (Signal.NONE, (), None)
    with pytest.raises(FrozenInstanceError):
        failure.retryable = False  # type: ignore[misc]


def test_a_failure_survives_its_dict_form() -> None:
    from classifier import Failure, FailureCategory, Signal

    failure = Failure(
        FailureCategory.RATE_LIMITED,
        True,
        retry_after=3.0,
        status_code=429,
        provider_code="Throttling",
        exception_type="botocore.exceptions.ClientError",
        signal=Signal.PROVIDER_CODE,
        chain=("botocore.exceptions.ClientError: slow down",),
        detail="ClientError: slow down",
    )
    data = failure.to_dict()
    assert data["category"] == "rate_limited" and data["taxonomy_version"] == 1
    assert Failure.from_dict(data) == failure
