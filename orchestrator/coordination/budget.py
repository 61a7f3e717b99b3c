"""Per-source retry budget (a token bucket) and circuit breaker, kept on SourceHealth rows.

Every change is one conditional or arithmetic UPDATE, so concurrent workers never lose a token or
both win the half-open probe.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce, Greatest, Least

from orchestrator.coordination import routing
from orchestrator.coordination.registry import registry
from orchestrator.models import SourceHealth
from orchestrator.vocabulary import RETRYABLE

Breaker = SourceHealth.Breaker
# A 404 or a 400 says nothing about the provider's health.
BREAKER_TYPES = RETRYABLE
PROBE_RECHECK = 5.0


def health(source: str) -> SourceHealth:
    row, _ = SourceHealth.objects.get_or_create(source=source)
    return row


def state(source: str) -> routing.Budget:
    h = health(source)
    return routing.Budget(
        source=source,
        tokens=h.budget_tokens,
        capacity=h.budget_capacity,
        retry_cost=h.retry_cost,
        timeout_retry_cost=h.timeout_retry_cost,
        breaker=h.breaker_state,
        opened_at=h.opened_at,
        cooldown=h.breaker_cooldown,
    )


def try_spend(source: str, cost: float) -> bool:
    """Take `cost` tokens for a retry; False if the bucket holds fewer (someone else took them)."""
    if cost <= 0:
        return True
    health(source)
    changed = SourceHealth.objects.filter(source=source, budget_tokens__gte=cost).update(
        budget_tokens=F("budget_tokens") - cost
    )
    return bool(changed)


def record_success(source: str) -> None:
    health(source)
    SourceHealth.objects.filter(source=source).update(
        budget_tokens=Least(F("budget_capacity"), F("budget_tokens") + F("success_refund")),
        consecutive_failures=0,
        breaker_state=Breaker.CLOSED,
        opened_at=None,
    )


def record_failure(
    source: str, failure_type: str, now: datetime, retry_after: float | None = None
) -> None:
    """Count a failure toward the breaker; remember a provider's Retry-After for every caller."""
    health(source)
    rows = SourceHealth.objects.filter(source=source)
    if retry_after is not None and retry_after > 0:
        hold(source, now + timedelta(seconds=retry_after))
    if failure_type not in BREAKER_TYPES:
        return
    rows.update(consecutive_failures=F("consecutive_failures") + 1)
    tripped = Q(breaker_state=Breaker.CLOSED, consecutive_failures__gte=F("breaker_threshold"))
    rows.filter(tripped | Q(breaker_state=Breaker.HALF_OPEN)).update(
        breaker_state=Breaker.OPEN, opened_at=now
    )


def hold(source: str, until: datetime) -> None:
    """Let nobody call `source` before `until` (its Retry-After); a later hold wins."""
    health(source)
    SourceHealth.objects.filter(source=source).update(
        not_before=Greatest(Coalesce(F("not_before"), Value(until)), Value(until))
    )


def admit(source: str, now: datetime) -> datetime | None:
    """Return None if a call to `source` may go now, else when to ask again."""
    h = health(source)
    if h.not_before and h.not_before > now:
        return h.not_before
    if h.breaker_state == Breaker.CLOSED:
        return None
    reopen = (h.opened_at or now) + timedelta(seconds=h.breaker_cooldown)
    if now < reopen:
        return reopen if h.breaker_state == Breaker.OPEN else min(reopen, _recheck(now))
    # Cool-down over (or a probe lost for a whole cool-down): one caller wins the probe.
    won = SourceHealth.objects.filter(
        pk=h.pk, breaker_state=h.breaker_state, opened_at=h.opened_at
    ).update(breaker_state=Breaker.HALF_OPEN, opened_at=now)
    return None if won else _recheck(now)


def _recheck(now: datetime) -> datetime:
    return now + timedelta(seconds=PROBE_RECHECK)


@dataclass(frozen=True)
class SourceState:
    source: str
    breaker: str
    consecutive_failures: int
    tokens: float
    capacity: float
    empty: bool
    not_before: datetime | None

    @property
    def in_trouble(self) -> bool:
        return self.breaker != Breaker.CLOSED or self.empty

    @property
    def label(self) -> str:
        text = f"breaker {self.breaker.replace('_', '-')}"
        return text + (", budget empty" if self.empty else "")


def source_states() -> list[SourceState]:
    rows = list(SourceHealth.objects.order_by("source"))
    missing = set(registry().sources) - {h.source for h in rows}
    if missing:
        SourceHealth.objects.bulk_create(
            [SourceHealth(source=name) for name in sorted(missing)], ignore_conflicts=True
        )
        rows = list(SourceHealth.objects.order_by("source"))
    return [
        SourceState(
            source=h.source,
            breaker=h.breaker_state,
            consecutive_failures=h.consecutive_failures,
            tokens=h.budget_tokens,
            capacity=h.budget_capacity,
            empty=h.budget_empty,
            not_before=h.not_before,
        )
        for h in rows
    ]
