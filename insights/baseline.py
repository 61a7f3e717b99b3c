"""The status-aware baseline: what a user would run instead of Failsight, a retry library told which
failures are worth retrying (tenacity with a predicate, the AWS SDK's standard mode, the OpenAI and
Anthropic SDKs' retries), against which the Costs page counts spend and time avoided; the recovery
benchmark's status-aware arm (benchmarks/recovery_sdk.py) retries the same way.

A failure is retried when its own verdict says a retry can help (`retryable`, the classifier's),
or, without one, when its type is retryable by default (`classifier.RETRYABLE`); up to
MAX_ATTEMPTS attempts in all, each after the failed call's own Retry-After, else after an
exponential backoff (1 s, 2 s, 4 s, … at most MAX_BACKOFF). Any other failure (an auth failure,
a missing resource, invalid input, one that said a retry cannot help) is not retried at all, and
nothing is switched, refreshed or kept partial."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from classifier import RETRYABLE

MAX_ATTEMPTS = 3
MAX_BACKOFF = 8.0
# The failures the baseline retries, as a condition on runs (`retries` in Python).
RETRIES = Q(retryable=True) | Q(retryable__isnull=True, failure_type__in=sorted(RETRYABLE))


def retries(failure: dict[str, Any]) -> bool:
    """Whether the baseline retries `failure` (a run's `retryable` and `failure_type`)."""
    verdict = failure["retryable"]
    return verdict is True or (verdict is None and failure["failure_type"] in RETRYABLE)


def wait(attempt: int, retry_after: float | None) -> float:
    """Seconds the baseline waits after failed attempt `attempt` (1 for the first)."""
    if retry_after is not None:
        return float(retry_after)
    return min(MAX_BACKOFF, 2.0 ** (attempt - 1))


def expected(
    attempt: int, recovery: float, retry_after: float | None, call_seconds: float
) -> tuple[float, float]:
    """The calls the baseline makes after failed attempt `attempt` of a failure it retries, and the
    seconds they take (each retry's wait and its call, as long as the failed one), expected: each
    retry is made while the one before failed, a retry recovering at rate `recovery`. Every retry
    is assumed to be told the first failure's Retry-After."""
    calls = seconds = 0.0
    reach = 1.0
    for failed in range(attempt, MAX_ATTEMPTS):
        calls += reach
        seconds += reach * (wait(failed, retry_after) + call_seconds)
        reach *= 1 - recovery
    return calls, seconds
