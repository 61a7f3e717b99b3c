"""routing.decide, exhaustively per failure type. Pure: no database; time and rng injected."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.coordination import routing
from orchestrator.coordination.routing import (
    ABORT,
    ACCEPT_PARTIAL,
    ESCALATE,
    RETRY,
    SWITCH_SOURCE,
    WAIT,
    Budget,
    Context,
    PolicySnapshot,
    Rule,
    decide,
)
from orchestrator.vocabulary import Action

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
POLICY = PolicySnapshot.from_rows(7, [])
ALL_TYPES = list(routing.DEFAULT_RULES)
RETRYABLE = ["transient", "rate_limited", "timeout", "server_fault"]
HARD = ["auth_failure", "resource_missing", "invalid_input"]


def top(_: float = 0) -> float:
    return 0.999999


def bottom() -> float:
    return 0.0


def ctx(**kw) -> Context:
    return Context(source="news_api", **kw)


def test_routing_imports_no_django():
    code = (
        "import sys, orchestrator.coordination.routing;"
        "print(any(m.startswith('django') for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("ftype", RETRYABLE)
def test_it_retries_retryable_types_on_the_first_failure(ftype):
    d = decide({"failure_type": ftype}, 1, POLICY, Budget(), ctx(), now=NOW, rng=bottom)
    assert d.action == RETRY
    assert d.policy_version == 7
    assert "attempt 2 of" in d.reason


@pytest.mark.parametrize("ftype", RETRYABLE)
def test_full_jitter_stays_between_zero_and_the_capped_backoff(ftype):
    rule = POLICY.rule(ftype)
    for attempt in range(1, rule.max_attempts):
        cap = min(rule.max_delay, rule.base_delay * rule.multiplier ** (attempt - 1))
        high = decide({"failure_type": ftype}, attempt, POLICY, Budget(), ctx(), rng=top)
        low = decide({"failure_type": ftype}, attempt, POLICY, Budget(), ctx(), rng=bottom)
        assert low.delay_seconds == 0
        assert high.delay_seconds == pytest.approx(cap, abs=1e-3)


@pytest.mark.parametrize("ftype", RETRYABLE)
def test_it_stops_retrying_when_attempts_are_used_and_switches_source(ftype):
    rule = POLICY.rule(ftype)
    d = decide(
        {"failure_type": ftype}, rule.max_attempts, POLICY, Budget(), ctx(has_alternative=True)
    )
    assert d.action == SWITCH_SOURCE
    assert f"all {rule.max_attempts} attempts" in d.reason


@pytest.mark.parametrize("partial", [0, 3])
@pytest.mark.parametrize("ftype", RETRYABLE)
def test_with_no_source_left_it_accepts_partial_or_records_a_gap(ftype, partial):
    rule = POLICY.rule(ftype)
    d = decide(
        {"failure_type": ftype}, rule.max_attempts, POLICY, Budget(), ctx(partial_count=partial)
    )
    assert d.action == ACCEPT_PARTIAL
    assert ("3 partial results" in d.reason) if partial else ("recording a gap" in d.reason)


@pytest.mark.parametrize("ftype", HARD)
@pytest.mark.parametrize("attempt", [1, 2, 5])
def test_hard_fail_types_are_never_retried(ftype, attempt):
    for alt in (True, False):
        d = decide({"failure_type": ftype}, attempt, POLICY, Budget(), ctx(has_alternative=alt))
        assert d.action != RETRY
        assert d.delay_seconds == 0


def test_resource_missing_switches_source_or_records_a_gap():
    f = {"failure_type": "resource_missing", "status_code": 404}
    assert decide(f, 1, POLICY, Budget(), ctx(has_alternative=True)).action == SWITCH_SOURCE
    gap = decide(f, 1, POLICY, Budget(), ctx())
    assert gap.action == ACCEPT_PARTIAL and "recording a gap" in gap.reason
    assert gap.reason.startswith("Not found on news_api (404)")


def test_invalid_input_fails_with_its_reason():
    d = decide({"failure_type": "invalid_input", "status_code": 400}, 1, POLICY, Budget(), ctx())
    assert d.action == ABORT
    assert "cannot succeed" in d.reason


def test_auth_failure_refreshes_once_when_a_refresher_exists_then_escalates():
    f = {"failure_type": "auth_failure", "status_code": 401}
    first = decide(f, 1, POLICY, Budget(), ctx(can_refresh=True))
    assert (first.action, first.delay_seconds) == (RETRY, 0)
    assert "refreshing its credentials once" in first.reason
    again = decide(f, 2, POLICY, Budget(), ctx(can_refresh=True, refreshed=True))
    assert again.action == ESCALATE
    assert "did not help" in again.reason


def test_auth_failure_without_refresher_escalates():
    d = decide({"failure_type": "auth_failure"}, 1, POLICY, Budget(), ctx(has_alternative=True))
    assert d.action == ESCALATE
    assert "no credential refresher" in d.reason


def test_unclassified_gets_one_retry_then_human_review():
    generous = PolicySnapshot.from_rows(
        2, [{"failure_type": "unclassified", "max_attempts": 5, "base_delay": 1, "max_delay": 9}]
    )
    f = {"failure_type": "unclassified"}
    assert decide(f, 1, generous, Budget(), ctx()).action == RETRY
    second = decide(f, 2, generous, Budget(), ctx(has_alternative=True))
    assert second.action == ESCALATE
    assert "all 2 attempts" in second.reason


@pytest.mark.parametrize("retry_after", [0.5, 2.0, 7.5, 119.0])
def test_rate_limits_never_retry_before_retry_after(retry_after):
    f = {"failure_type": "rate_limited", "retry_after": retry_after, "status_code": 429}
    for rng in (bottom, top):
        d = decide(f, 1, POLICY, Budget(), ctx(), rng=rng)
        assert d.action == RETRY
        assert d.delay_seconds >= retry_after


def test_the_rate_limit_reason_reads_as_a_sentence():
    f = {"failure_type": "rate_limited", "retry_after": 2.0}
    d = decide(f, 1, POLICY, Budget(), ctx(), rng=bottom)
    assert d.reason == (
        "Rate limited by news_api; retrying after the provider's Retry-After of 2.0 s "
        "(attempt 2 of 4)."
    )


def test_a_retry_after_beyond_the_policy_maximum_escalates():
    f = {"failure_type": "rate_limited", "retry_after": 600}
    d = decide(f, 1, POLICY, Budget(), ctx(has_alternative=True))
    assert d.action == ESCALATE
    assert "600.0 s" in d.reason and "120.0 s" in d.reason


def test_a_server_fault_honours_retry_after_too():
    f = {"failure_type": "server_fault", "retry_after": 9.0, "status_code": 503}
    assert decide(f, 1, POLICY, Budget(), ctx(), rng=bottom).delay_seconds == 9.0


@pytest.mark.parametrize("ftype", RETRYABLE)
def test_an_empty_budget_means_no_retry(ftype):
    empty = Budget(source="news_api", tokens=1, retry_cost=5, timeout_retry_cost=10)
    f = {"failure_type": ftype}
    assert decide(f, 1, POLICY, empty, ctx(has_alternative=True)).action == SWITCH_SOURCE
    assert decide(f, 1, POLICY, empty, ctx(partial_count=2)).action == ACCEPT_PARTIAL
    d = decide(f, 1, POLICY, empty, ctx())
    assert d.action == ESCALATE and "retry budget" in d.reason


def test_a_timeout_retry_costs_more_budget():
    assert Budget(tokens=7).can_afford("server_fault")
    assert not Budget(tokens=7).can_afford("timeout")
    d = decide({"failure_type": "timeout"}, 1, POLICY, Budget(), ctx(), rng=bottom)
    assert d.budget_cost == 10


def test_an_open_breaker_switches_source_or_waits_for_the_probe():
    opened = Budget(breaker="open", opened_at=NOW - timedelta(seconds=10), cooldown=30)
    f = {"failure_type": "server_fault"}
    assert decide(f, 1, POLICY, opened, ctx(has_alternative=True), now=NOW).action == SWITCH_SOURCE
    wait = decide(f, 1, POLICY, opened, ctx(), now=NOW)
    assert wait.action == WAIT and wait.delay_seconds == pytest.approx(20)
    assert wait.calls_again and wait.budget_cost == 0  # the probe, not a retry storm
    cooled = decide(f, 1, POLICY, opened, ctx(), now=NOW + timedelta(seconds=31), rng=bottom)
    assert cooled.action == RETRY and cooled.delay_seconds == 0


def held(seconds: float) -> Budget:
    return Budget(source="news_api", not_before=NOW + timedelta(seconds=seconds))


@pytest.mark.parametrize("ftype", RETRYABLE)
def test_a_source_in_hold_answers_wait_until_the_hold_ends_whatever_the_query(ftype):
    d = decide({"failure_type": ftype}, 1, POLICY, held(25), ctx(), now=NOW, rng=bottom)
    assert (d.action, d.delay_seconds) == (WAIT, 25.0) and d.calls_again
    assert d.budget_cost == Budget().cost(ftype)  # a retry all the same, paid as one
    assert "news_api holds every caller back for 25.0 s more" in d.reason
    most = POLICY.rule(ftype).max_attempts
    assert d.reason.endswith(f"so waiting for it (attempt 2 of {most}).")


def test_a_hold_shorter_than_the_failures_own_delay_leaves_a_retry():
    own = {"failure_type": "rate_limited", "retry_after": 10}
    assert decide(own, 1, POLICY, held(9.5), ctx(), now=NOW, rng=bottom).action == RETRY
    assert decide(own, 1, POLICY, held(30), ctx(), now=NOW, rng=bottom).action == WAIT
    past = decide({"failure_type": "timeout"}, 1, POLICY, held(-5), ctx(), now=NOW, rng=bottom)
    assert past.action == RETRY


def test_a_hold_longer_than_the_policy_allows_switches_or_gives_up():
    f = {"failure_type": "server_fault"}
    other = decide(
        f, 1, POLICY, held(600), ctx(has_alternative=True, switch_to="news_wire"), now=NOW
    )
    assert (other.action, other.switch_to) == (SWITCH_SOURCE, "news_wire")
    assert decide(f, 1, POLICY, held(600), ctx(), now=NOW).action == ACCEPT_PARTIAL


def test_a_hold_does_not_turn_a_final_failure_into_a_wait():
    for failure in (
        {"failure_type": "resource_missing"},
        {"failure_type": "timeout", "retryable": False},
    ):
        d = decide(failure, 1, POLICY, held(20), ctx(has_alternative=True), now=NOW)
        assert d.action == SWITCH_SOURCE


def test_an_open_breaker_and_a_hold_wait_for_the_later_of_the_two():
    opened = Budget(
        breaker="open",
        opened_at=NOW - timedelta(seconds=20),
        cooldown=30,
        not_before=NOW + timedelta(seconds=45),
    )
    d = decide({"failure_type": "server_fault"}, 1, POLICY, opened, ctx(), now=NOW)
    assert (d.action, d.delay_seconds) == (WAIT, 45.0)


def test_a_breaker_open_longer_than_the_policy_allows_gives_up():
    opened = Budget(breaker="open", opened_at=NOW, cooldown=3600)
    d = decide({"failure_type": "transient"}, 1, POLICY, opened, ctx(), now=NOW)
    assert d.action == ACCEPT_PARTIAL


def test_a_poisoned_task_is_escalated_not_retried():
    d = decide({"failure_type": "transient"}, 1, POLICY, Budget(), ctx(poisoned=True))
    assert d.action == ESCALATE and "parked" in d.reason


@pytest.mark.parametrize("ftype", ALL_TYPES)
def test_every_type_produces_a_known_action_with_a_sentence(ftype):
    for attempt in range(1, 6):
        d = decide({"failure_type": ftype}, attempt, POLICY, Budget(), ctx())
        assert d.action in set(Action)
        assert d.reason.endswith(".") and d.reason[0].isupper()


def test_an_unknown_failure_type_is_routed_as_unclassified():
    d = decide({"failure_type": "cosmic_rays"}, 2, POLICY, Budget(), ctx())
    assert d.failure_type == "unclassified" and d.action == ESCALATE


def test_it_reads_a_classifier_failure_object():
    class FakeFailure:
        category = type("C", (), {"value": "rate_limited"})()
        retry_after = 3.0
        status_code = 429

    d = decide(FakeFailure(), 1, POLICY, Budget(), ctx(), rng=bottom)
    assert d.action == RETRY and d.delay_seconds == 3.0


def test_equal_and_no_jitter_bounds():
    equal = Rule(
        "timeout", max_attempts=3, base_delay=2, max_delay=60, multiplier=3, jitter="equal"
    )
    assert routing.delay_bounds(equal, 2) == (3.0, 6.0)
    none = Rule("timeout", max_attempts=3, base_delay=2, max_delay=5, multiplier=3, jitter="none")
    assert routing.delay_bounds(none, 3) == (5.0, 5.0)


# ---------------------------------------------------------------------------------------------
# The failure's own retry signal


@pytest.mark.parametrize("ftype", RETRYABLE)
def test_retryable_false_is_never_retried_and_says_why(ftype):
    f = {"failure_type": ftype, "retryable": False, "status_code": 501}
    for attempt in (1, 2):
        d = decide(f, attempt, POLICY, Budget(), ctx(has_alternative=True), now=NOW, rng=bottom)
        assert d.action == SWITCH_SOURCE and d.delay_seconds == 0
        assert "the provider says a retry cannot help" in d.reason
    gap = decide(f, 1, POLICY, Budget(), ctx(partial_count=2))
    assert gap.action == ACCEPT_PARTIAL and "keeping its 2 partial results" in gap.reason


def test_the_reason_names_who_said_a_retry_cannot_help():
    f = {"failure_type": "server_fault", "retryable": False, "retryable_by": "the agent"}
    d = decide(f, 1, POLICY, Budget(), ctx())
    assert d.reason == (
        "Server fault at news_api; the agent says a retry cannot help and no other source is "
        "left; recording a gap."
    )


def test_an_unclassified_failure_that_says_no_retry_goes_to_a_human_at_once():
    d = decide({"failure_type": "unclassified", "retryable": False}, 1, POLICY, Budget(), ctx())
    assert d.action == ESCALATE and "cannot help" in d.reason


@pytest.mark.parametrize("ftype", HARD)
def test_retryable_true_never_makes_a_hard_fail_type_retry(ftype):
    for attempt in (1, 2, 3):
        d = decide({"failure_type": ftype, "retryable": True}, attempt, POLICY, Budget(), ctx())
        assert d.action != RETRY or (ftype == "auth_failure" and d.refresh)


@pytest.mark.parametrize("ftype", RETRYABLE)
def test_unknown_retryability_keeps_the_tables_behaviour(ftype):
    with_none = decide({"failure_type": ftype, "retryable": None}, 1, POLICY, rng=bottom)
    without = decide({"failure_type": ftype}, 1, POLICY, rng=bottom)
    assert with_none == without and with_none.action == RETRY


def test_an_auth_failure_that_says_no_retry_is_refreshed_once_or_escalated():
    f = {"failure_type": "auth_failure", "retryable": False, "status_code": 401}
    refresh = decide(f, 1, POLICY, Budget(), ctx(can_refresh=True))
    assert (refresh.action, refresh.refresh, refresh.delay_seconds) == (RETRY, True, 0)
    assert "refreshing its credentials once" in refresh.reason
    escalated = decide(f, 1, POLICY, Budget(), ctx())
    assert (escalated.action, escalated.refresh) == (ESCALATE, False)
    after = decide(f, 2, POLICY, Budget(), ctx(can_refresh=True, refreshed=True))
    assert after.action == ESCALATE


def test_only_the_credential_refresh_is_marked_as_one():
    for ftype in ALL_TYPES:
        d = decide({"failure_type": ftype}, 1, POLICY, Budget(), ctx(), rng=bottom)
        assert d.refresh is False


def _rules():
    return st.builds(
        dict,
        failure_type=st.sampled_from(ALL_TYPES),
        max_attempts=st.integers(1, 20),
        base_delay=st.floats(0, 100),
        max_delay=st.floats(0, 1000),
        multiplier=st.floats(1, 5),
        jitter=st.sampled_from(["full", "equal", "none"]),
        action_when_exhausted=st.sampled_from(list(Action)),
        hard_fail=st.booleans(),
    )


@settings(max_examples=400, deadline=None)
@given(
    ftype=st.sampled_from(ALL_TYPES),
    attempt=st.integers(1, 30),
    rows=st.lists(_rules(), max_size=8),
    retry_after=st.one_of(st.none(), st.floats(0, 10_000)),
    status=st.one_of(st.none(), st.integers(100, 599)),
    tokens=st.floats(0, 1000),
    breaker=st.sampled_from(["closed", "open", "half_open"]),
    opened_ago=st.floats(0, 7200),
    held_for=st.one_of(st.none(), st.floats(-60, 7200)),
    has_alternative=st.booleans(),
    can_refresh=st.booleans(),
    refreshed=st.booleans(),
    partial=st.integers(0, 10),
    rng=st.floats(0, 0.999999),
    who=st.sampled_from(["the provider", "the agent", "a provider override"]),
)
def test_a_failure_that_says_no_retry_is_never_retried_blindly(
    ftype,
    attempt,
    rows,
    retry_after,
    status,
    tokens,
    breaker,
    opened_ago,
    held_for,
    has_alternative,
    can_refresh,
    refreshed,
    partial,
    rng,
    who,
):
    """Whatever the routing table, budget, breaker, hold, context and attempt: retryable false
    never yields a retry or a wait, except the one credential refresh of an auth failure (the
    request changes)."""
    policy = PolicySnapshot.from_rows(3, rows)
    failure = {"failure_type": ftype, "retryable": False, "retryable_by": who}
    failure |= {"retry_after": retry_after, "status_code": status}
    held = None if held_for is None else NOW + timedelta(seconds=held_for)
    opened = NOW - timedelta(seconds=opened_ago)
    budget = Budget(tokens=tokens, breaker=breaker, opened_at=opened, not_before=held)
    context = ctx(
        has_alternative=has_alternative,
        can_refresh=can_refresh,
        refreshed=refreshed,
        partial_count=partial,
    )
    d = decide(failure, attempt, policy, budget, context, now=NOW, rng=lambda: rng)
    assert d.action != WAIT
    if d.action == RETRY:
        assert d.refresh and ftype == "auth_failure" and can_refresh and not refreshed
    else:
        assert not d.refresh


# ---------------------------------------------------------------------------------------------
# Reason sentences and switch targets


@pytest.mark.parametrize(
    ("jitter", "phrase"),
    [
        ("full", "backoff with full jitter"),
        ("equal", "backoff with equal jitter"),
        ("none", "fixed backoff without jitter"),
    ],
)
def test_backoff_reasons_read_as_sentences(jitter, phrase):
    rows = [{"failure_type": "timeout", "jitter": jitter, "base_delay": 2, "max_delay": 60}]
    d = decide({"failure_type": "timeout"}, 1, PolicySnapshot.from_rows(1, rows), rng=top)
    assert phrase in d.reason and "none jitter" not in d.reason
    assert (
        d.reason
        == f"Timed out waiting for the source; retrying in 2.0 s, {phrase} (attempt 2 of 3)."
    )


def test_a_switch_names_its_target_and_whether_the_agent_suggested_it():
    f = {"failure_type": "resource_missing", "status_code": 404}
    known = decide(f, 1, POLICY, Budget(), ctx(has_alternative=True, switch_to="news_wire"))
    assert (known.action, known.switch_to) == (SWITCH_SOURCE, "news_wire")
    assert known.reason.endswith("; news_wire is tried next.")
    suggested = ctx(has_alternative=True, switch_to="scholar_api", suggested=True)
    d = decide(f, 1, POLICY, Budget(), suggested)
    assert d.switch_to == "scholar_api" and "scholar_api, which the agent suggested" in d.reason
    assert decide(f, 1, POLICY, Budget(), ctx()).switch_to is None


def test_an_alias_is_routed_as_its_category():
    d = decide({"failure_type": "rate_limit", "retry_after": 2}, 1, POLICY, rng=bottom)
    assert d.failure_type == "rate_limited" and d.delay_seconds == 2.0


def test_a_sub_second_retry_delay_reads_in_milliseconds_not_as_zero():
    # The run page shows the delay as "43 ms": the reason beside it must not say "0.0 s".
    rows = [{"failure_type": "timeout", "jitter": "none", "base_delay": 0.043, "max_delay": 1}]
    d = decide({"failure_type": "timeout"}, 1, PolicySnapshot.from_rows(1, rows), rng=top)
    assert "retrying in 43 ms" in d.reason and "0.0 s" not in d.reason
