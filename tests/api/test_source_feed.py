"""The source-health feed runs off the request path (`orchestrator.ingest.feed`) and keeps its
contract: a reported failure reaches its source's breaker and Retry-After hold within a second of
its answer, and a decision asked of the same process sees it at once."""

from __future__ import annotations

import time

import pytest

from orchestrator.coordination.budget import BREAKER_TYPES
from orchestrator.ingest import sources
from orchestrator.models import SourceHealth
from tests.api.helpers import failed_run, post_json

SOURCE = "feed-source"
CONTRACT = 1.0  # seconds from the answer


def failure(**fields):
    assert "server_fault" in BREAKER_TYPES  # a failure that counts toward the breaker
    return failed_run(
        source=SOURCE, failure_type="server_fault", status_code=503, retry_after=30.0, **fields
    )


def health() -> SourceHealth | None:
    return SourceHealth.objects.filter(source=SOURCE).first()


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_failure_reaches_its_sources_breaker_and_hold_within_a_second(client, auth_headers):
    response = post_json(client, "/runs", failure(), **auth_headers)
    answered = time.monotonic()
    assert response.status_code == 201, response.content
    seen = None
    while time.monotonic() - answered <= CONTRACT:
        row = health()
        if row is not None and row.consecutive_failures == 1 and row.not_before is not None:
            seen = time.monotonic() - answered
            break
        time.sleep(0.02)
    assert seen is not None, f"not fed within {CONTRACT} s: {health() and vars(health())}"
    assert sources.FEED.pending == 0


@pytest.mark.slow
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_decision_sees_the_failures_this_process_has_just_stored(client, auth_headers):
    for query in range(5):
        response = post_json(client, "/runs", failure(attempted={"q": query}), **auth_headers)
        assert response.status_code == 201, response.content
    asked = {"failure": {"failure_type": "timeout"}, "attempt": 1, "source": SOURCE}
    decided = post_json(client, "/decisions", asked, **auth_headers).json()
    assert decided["action"] == "wait" and 25 < decided["delay_seconds"] <= 30, decided
    assert health().consecutive_failures == 5


def test_inside_the_callers_transaction_the_feed_is_applied_at_once(client, auth_headers):
    response = post_json(client, "/runs", failure(), **auth_headers)
    assert response.status_code == 201, response.content
    assert health().consecutive_failures == 1 and health().not_before is not None
    assert sources.FEED.pending == 0
