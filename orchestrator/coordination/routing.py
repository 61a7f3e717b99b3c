"""Routing: what the coordinator does about one failure. Pure: no Django, no database, no clock
(time enters through `now` and randomness through `rng`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from classifier.taxonomy import UnknownFailureType, parse_failure_type
from orchestrator.vocabulary import Action, Breaker, FailureCategory, Jitter

C = FailureCategory
RETRY, WAIT, SWITCH_SOURCE, SWITCH_AND_ESCALATE, ACCEPT_PARTIAL, ESCALATE, ABORT = (
    Action.RETRY,
    Action.WAIT,
    Action.SWITCH_SOURCE,
    Action.SWITCH_AND_ESCALATE,
    Action.ACCEPT_PARTIAL,
    Action.ESCALATE,
    Action.ABORT,
)
UNCLASSIFIED = C.UNCLASSIFIED
# Holds whatever an operator sets in the unclassified row.
UNCLASSIFIED_MAX_ATTEMPTS = 2

# The seeded defaults (migration 0002): a missing row must never make routing retry blindly.
DEFAULT_RULES: dict[str, dict[str, Any]] = {
    C.TRANSIENT: dict(max_attempts=4, base_delay=1.0, max_delay=30.0, multiplier=2.0),
    C.RATE_LIMITED: dict(max_attempts=4, base_delay=2.0, max_delay=120.0, multiplier=2.0),
    C.AUTH_FAILURE: dict(
        max_attempts=1, hard_fail=True, action_when_exhausted=ESCALATE, refresh_credentials=True
    ),
    C.RESOURCE_MISSING: dict(max_attempts=1, hard_fail=True),
    C.INVALID_INPUT: dict(
        max_attempts=1, hard_fail=True, action_when_exhausted=ABORT, review_fallback=ABORT
    ),
    C.TIMEOUT: dict(max_attempts=3, base_delay=2.0, max_delay=60.0, multiplier=3.0),
    C.SERVER_FAULT: dict(max_attempts=4, base_delay=1.0, max_delay=60.0, multiplier=2.0),
    C.UNCLASSIFIED: dict(
        max_attempts=2,
        base_delay=5.0,
        max_delay=5.0,
        jitter=Jitter.NONE,
        action_when_exhausted=ESCALATE,
    ),
}

_PHRASES = {
    C.TRANSIENT: "A transient network failure on {source}",
    C.RATE_LIMITED: "Rate limited by {source}",
    C.AUTH_FAILURE: "Credentials rejected by {source}",
    C.RESOURCE_MISSING: "Not found on {source}",
    C.INVALID_INPUT: "Request refused as invalid by {source}",
    C.TIMEOUT: "Timed out waiting for {source}",
    C.SERVER_FAULT: "Server fault at {source}",
    C.UNCLASSIFIED: "An error we could not classify from {source}",
}

_JITTER_PHRASES = {
    Jitter.FULL: "backoff with full jitter",
    Jitter.EQUAL: "backoff with equal jitter",
    Jitter.NONE: "fixed backoff without jitter",
}

PROVIDER = "the provider"


def offers_refresh(alternatives: Any) -> bool:
    """Whether a failure's own suggestions say its agent can refresh its credentials (the
    envelope's `alternatives_suggested: ["refresh credentials"]`)."""
    if not isinstance(alternatives, list | tuple):
        return False
    return any(isinstance(a, str) and "refresh" in a.lower() for a in alternatives)


@dataclass(frozen=True)
class Rule:
    failure_type: str
    max_attempts: int = 1
    base_delay: float = 0.0
    max_delay: float = 0.0
    multiplier: float = 2.0
    jitter: str = Jitter.FULL
    action_when_exhausted: str = SWITCH_SOURCE
    hard_fail: bool = False
    review_deadline: int = 24 * 3600
    review_fallback: str = ACCEPT_PARTIAL
    # What a failure on a source (or of an agent) past its daily spend limit gets instead of a
    # call that would spend more (a retry, a wait, a switch): a human's decision, or the end.
    over_budget_action: str = ESCALATE
    # An auth failure whose caller can refresh its credentials is refreshed, then retried once.
    refresh_credentials: bool = False

    @classmethod
    def from_data(cls, row: Mapping[str, Any]) -> Rule:
        names = cls.__dataclass_fields__.keys()
        return cls(**{k: v for k, v in row.items() if k in names})


@dataclass(frozen=True)
class PolicySnapshot:
    version: int
    rules: Mapping[str, Rule]

    @classmethod
    def from_rows(cls, version: int, rows: list[Mapping[str, Any]]) -> PolicySnapshot:
        rules = {ft: Rule.from_data({"failure_type": ft, **d}) for ft, d in DEFAULT_RULES.items()}
        for row in rows:
            ft = row["failure_type"]
            rules[ft] = Rule.from_data({**DEFAULT_RULES.get(ft, {}), **row})
        return cls(version=version, rules=rules)

    def rule(self, failure_type: str) -> Rule:
        return self.rules.get(failure_type) or self.rules[UNCLASSIFIED]


@dataclass(frozen=True)
class Budget:
    source: str = ""
    tokens: float = 500.0
    capacity: float = 500.0
    retry_cost: float = 5.0
    timeout_retry_cost: float = 10.0
    breaker: str = Breaker.CLOSED
    opened_at: datetime | None = None
    cooldown: float = 30.0
    # A Retry-After the source gave any caller: nobody calls it before then.
    not_before: datetime | None = None

    def cost(self, failure_type: str) -> float:
        return self.timeout_retry_cost if failure_type == C.TIMEOUT else self.retry_cost

    def can_afford(self, failure_type: str) -> bool:
        return self.tokens >= self.cost(failure_type)

    def breaker_wait(self, now: datetime) -> float:
        """Return the seconds until an open breaker lets a probe through (0 if not open)."""
        if self.breaker != Breaker.OPEN or self.opened_at is None:
            return 0.0
        reopen = self.opened_at + timedelta(seconds=self.cooldown)
        return max(0.0, (reopen - now).total_seconds())

    def hold_wait(self, now: datetime) -> float:
        """Return the seconds until the source's Retry-After hold ends (0 if none)."""
        if self.not_before is None:
            return 0.0
        return max(0.0, (self.not_before - now).total_seconds())


@dataclass(frozen=True)
class Context:
    source: str = "the source"
    has_alternative: bool = False
    switch_to: str | None = None
    suggested: bool = False
    can_refresh: bool = False
    refreshed: bool = False
    partial_count: int = 0
    poisoned: bool = False
    agent: str = ""
    # Why the source or the agent may spend no more today (its daily spend limit is reached),
    # else "": `budget.decide` reads it from the spend budgets.
    over_budget: str = ""
    # The project of the run being routed: its overrides of the policy apply (None: the global).
    project_id: int | None = None


@dataclass(frozen=True)
class Decision:
    """What to do, why, and under which policy version; `refresh` marks an auth failure's one
    retry after refreshing the credentials. `wait` is a retry whose delay the source set for
    every caller (its hold or its open breaker), not this failure's own backoff. `escalate`
    marks a switch that also asks a person to repair the failing source (the policy's
    switch_and_escalate): a review item the work does not wait for."""

    action: str
    delay_seconds: float
    reason: str
    policy_version: int
    budget_cost: float = 0.0
    failure_type: str = UNCLASSIFIED
    refresh: bool = False
    switch_to: str | None = None
    escalate: bool = False

    @property
    def calls_again(self) -> bool:
        """Whether the same source is called again (after `delay_seconds`): the budget pays."""
        return self.action in (RETRY, WAIT)

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "delay_seconds": self.delay_seconds,
            "reason": self.reason,
            "policy_version": self.policy_version,
            "refresh": self.refresh,
            "switch_to": self.switch_to,
            "escalate": self.escalate,
        }


@dataclass(frozen=True)
class FailureFacts:
    """The few facts routing reads, from a classifier Failure, an envelope or a dict."""

    failure_type: str
    retry_after: float | None = None
    status_code: int | None = None
    detail: str = ""
    retryable: bool | None = None
    retryable_by: str = PROVIDER
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, failure: Any) -> FailureFacts:
        """Read the facts leniently: an unknown failure type is routed as unclassified."""
        if isinstance(failure, FailureFacts):
            return failure
        get = failure.get if isinstance(failure, Mapping) else lambda k: getattr(failure, k, None)
        named = get("failure_type") or get("category") or UNCLASSIFIED
        try:
            ftype = parse_failure_type(getattr(named, "value", named))
        except UnknownFailureType:
            ftype = UNCLASSIFIED
        retry_after = get("retry_after")
        try:
            retry_after = None if retry_after is None else max(0.0, float(retry_after))
        except (TypeError, ValueError):
            retry_after = None
        status = get("status_code")
        retryable = get("retryable")
        return cls(
            failure_type=ftype.value,
            retry_after=retry_after,
            status_code=status if isinstance(status, int) else None,
            detail=str(get("detail") or ""),
            retryable=retryable if isinstance(retryable, bool) else None,
            retryable_by=str(get("retryable_by") or PROVIDER),
        )


def delay_bounds(rule: Rule, attempt: int) -> tuple[float, float]:
    """Return (min, max) of the delay before the retry that follows failed attempt `attempt`."""
    cap = min(rule.max_delay, rule.base_delay * rule.multiplier ** max(0, attempt - 1))
    if rule.jitter == Jitter.FULL:
        return 0.0, cap
    if rule.jitter == Jitter.EQUAL:
        return cap / 2, cap
    return cap, cap


def backoff(rule: Rule, attempt: int, rng: Callable[[], float]) -> float:
    """Return the jittered backoff after failed attempt `attempt`."""
    low, high = delay_bounds(rule, attempt)
    return low + (high - low) * rng()


def decide(
    failure: Any,
    attempt: int,
    policy: PolicySnapshot,
    budget: Budget | None = None,
    context: Context | None = None,
    *,
    now: datetime | None = None,
    rng: Callable[[], float] = random.random,
) -> Decision:
    """Return what to do after `failure` ended attempt number `attempt` (1 = the first call)."""
    facts = FailureFacts.of(failure)
    ctx = context or Context(source=budget.source if budget and budget.source else "the source")
    budget = budget or Budget(source=ctx.source)
    rule = policy.rule(facts.failure_type)
    say = _Sayer(facts, ctx, rule, attempt, policy.version)
    if ctx.poisoned:
        return say.decision(
            ESCALATE, 0, "the task killed its worker on every delivery, so it was parked"
        )
    decision = _route(say, facts, rule, attempt, budget, ctx, now, rng)
    if ctx.over_budget and decision.action in SPENDING:
        action = rule.over_budget_action if rule.over_budget_action in OVER_BUDGET else ESCALATE
        then = "a human decides" if action == ESCALATE else "this task stops"
        return say.decision(action, 0, f"{ctx.over_budget}, so {then}")
    return decision


# The decisions that call a source again (and so spend); past a spend budget they are replaced.
SPENDING = (RETRY, WAIT, SWITCH_SOURCE)
OVER_BUDGET = (ESCALATE, ABORT)


def _route(
    say: _Sayer,
    facts: FailureFacts,
    rule: Rule,
    attempt: int,
    budget: Budget,
    ctx: Context,
    now: datetime | None,
    rng: Callable[[], float],
) -> Decision:
    if facts.failure_type == C.AUTH_FAILURE:
        return _route_auth(say, rule, ctx)
    if rule.hard_fail:
        return _exhausted(say, ctx, "the same request cannot succeed, so it is not retried")
    if facts.retryable is False:
        # Whoever said so knows better than the table, whatever attempts are left.
        return _exhausted(say, ctx, f"{facts.retryable_by} says a retry cannot help")
    return _route_retryable(say, facts, rule, attempt, budget, ctx, now, rng)


def _route_auth(say: _Sayer, rule: Rule, ctx: Context) -> Decision:
    if rule.refresh_credentials and ctx.can_refresh and not ctx.refreshed:
        # Not a blind retry: the credentials change.
        why = "refreshing its credentials once, then retrying at once with the new ones"
        return say.decision(RETRY, 0, why, refresh=True)
    if ctx.refreshed:
        why = "refreshing its credentials did not help"
    elif not ctx.can_refresh:
        why = "no credential refresher is registered for it, nor did its agent offer one"
    else:
        why = "the policy does not refresh credentials first"
    return _exhausted(say, ctx, f"{why}, and a blind retry cannot succeed")


def _route_retryable(
    say: _Sayer,
    facts: FailureFacts,
    rule: Rule,
    attempt: int,
    budget: Budget,
    ctx: Context,
    now: datetime | None,
    rng: Callable[[], float],
) -> Decision:
    max_attempts = rule.max_attempts
    if facts.failure_type == UNCLASSIFIED:
        max_attempts = min(max_attempts, UNCLASSIFIED_MAX_ATTEMPTS)
    if attempt >= max_attempts:
        used = f"all {max_attempts} attempts the policy allows are used"
        if facts.failure_type == UNCLASSIFIED:
            return say.decision(ESCALATE, 0, f"{used}; a human decides from the raw detail")
        return _exhausted(say, ctx, used)
    ra = facts.retry_after
    if ra is not None and ra > rule.max_delay:
        return say.decision(
            ESCALATE,
            0,
            f"the provider asked us to wait {_seconds(ra)}, longer than the policy's maximum "
            f"delay of {_seconds(rule.max_delay)}, so a human decides",
        )
    wait = budget.breaker_wait(now) if now else 0.0
    held = budget.hold_wait(now) if now else 0.0
    if wait > 0:
        return _route_open_breaker(say, ctx, rule, (wait, held), attempt, max_attempts)
    if held > rule.max_delay:
        return _route_long_hold(say, ctx, held)
    if not budget.can_afford(facts.failure_type):
        return _route_empty_budget(say, ctx, budget)
    delay = backoff(rule, attempt, rng)
    of = f" (attempt {attempt + 1} of {max_attempts})"
    cost = budget.cost(facts.failure_type)
    if held > max(delay, ra or 0.0):
        why = (
            f"{ctx.source} holds every caller back for {_seconds(held)} more "
            "(a Retry-After it sent)"
        )
        return say.decision(WAIT, held, f"{why}, so waiting for it{of}", cost=cost)
    if ra is not None and delay < ra:
        delay = ra
        why = f"retrying after the provider's Retry-After of {_seconds(ra)}"
    else:
        spread = _JITTER_PHRASES.get(rule.jitter, _JITTER_PHRASES[Jitter.FULL])
        why = f"retrying in {_seconds(delay)}, {spread}"
    return say.decision(RETRY, delay, why + of, cost=cost)


def _seconds(value: float) -> str:
    """A delay in a reason as the run page shows it beside the reason: under a second in
    milliseconds (a 43 ms backoff is not "0.0 s"), else in seconds to a tenth."""
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.1f} s"


def _route_open_breaker(
    say: _Sayer,
    ctx: Context,
    rule: Rule,
    waits: tuple[float, float],
    attempt: int,
    max_attempts: int,
) -> Decision:
    """`waits`: until the breaker lets a probe through, and until the source's hold ends."""
    if ctx.has_alternative:
        return say.switch("its circuit breaker is open, so")
    wait = max(waits)
    if wait <= rule.max_delay:
        return say.decision(
            WAIT,
            wait,
            f"its circuit breaker is open and no other source exists, so waiting {_seconds(wait)} "
            f"for the probe (attempt {attempt + 1} of {max_attempts})",
        )
    if waits[1] > waits[0]:
        return _route_long_hold(say, ctx, waits[1])
    return _exhausted(say, ctx, f"its circuit breaker stays open for {wait:.0f} s more")


def _route_long_hold(say: _Sayer, ctx: Context, held: float) -> Decision:
    why = f"{ctx.source} holds every caller back for {held:.0f} s more (a Retry-After it sent)"
    if ctx.has_alternative:
        return say.switch(f"{why}, longer than the policy's maximum delay, so")
    return _exhausted(say, ctx, why)


def _route_empty_budget(say: _Sayer, ctx: Context, budget: Budget) -> Decision:
    why = f"the retry budget of {budget.source or ctx.source} is spent ({budget.tokens:.0f} left)"
    if ctx.has_alternative:
        return say.switch(f"{why}, so")
    if ctx.partial_count:
        return say.decision(ACCEPT_PARTIAL, 0, f"{why}, so the partial results are kept")
    return say.decision(ESCALATE, 0, f"{why} and nothing was gathered, so a human decides")


def _exhausted(say: _Sayer, ctx: Context, why: str) -> Decision:
    """Apply the rule's action for when retrying is over, degrading a switch with no source left."""
    action = say.rule.action_when_exhausted
    if action in (SWITCH_SOURCE, SWITCH_AND_ESCALATE) and ctx.has_alternative:
        return say.switch(f"{why};", escalate=action == SWITCH_AND_ESCALATE)
    if action == SWITCH_AND_ESCALATE:
        # Only work with no alternative waits for the person.
        return say.decision(ESCALATE, 0, f"{why} and no other source is left; a human decides")
    if action == SWITCH_SOURCE:
        kept = (
            f"keeping its {ctx.partial_count} partial results"
            if ctx.partial_count
            else "recording a gap"
        )
        return say.decision(ACCEPT_PARTIAL, 0, f"{why} and no other source is left; {kept}")
    if action == ACCEPT_PARTIAL:
        return say.decision(ACCEPT_PARTIAL, 0, f"{why}; keeping what was gathered")
    if action == ABORT:
        return say.decision(ABORT, 0, f"{why}; this task fails with the reason above")
    return say.decision(ESCALATE, 0, f"{why}; a human decides")


@dataclass(frozen=True)
class _Sayer:
    facts: FailureFacts
    ctx: Context
    rule: Rule
    attempt: int
    version: int

    def switch(self, why: str, escalate: bool = False) -> Decision:
        target = self.ctx.switch_to
        repair = f", and a person is asked to repair {self.ctx.source}" if escalate else ""
        whose = ", which the agent suggested," if self.ctx.suggested else ""
        tried = "the next source is tried" if target is None else f"{target}{whose} is tried next"
        decided = self.decision(SWITCH_SOURCE, 0, f"{why} {tried}{repair}")
        return replace(decided, escalate=escalate)

    def decision(
        self, action: str, delay: float, why: str, cost: float = 0.0, refresh: bool = False
    ) -> Decision:
        what = _PHRASES.get(self.facts.failure_type, _PHRASES[UNCLASSIFIED])
        what = what.format(source=self.ctx.source)
        if self.facts.status_code:
            what += f" ({self.facts.status_code})"
        reason = f"{what}; {why}."
        return Decision(
            action=action,
            delay_seconds=round(max(0.0, delay), 3),
            reason=reason,
            policy_version=self.version,
            budget_cost=cost,
            failure_type=self.facts.failure_type,
            refresh=refresh,
            switch_to=self.ctx.switch_to if action == SWITCH_SOURCE else None,
        )
