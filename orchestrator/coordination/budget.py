"""Per source: the retry budget (a token bucket), the circuit breaker and the Retry-After hold, kept
on SourceHealth rows and fed by every answer the source gave, whoever reports it (`record`); and
`decide`, the one routing decision every path asks for with that state.

Every change is one conditional or arithmetic UPDATE, so concurrent workers never lose a token or
both win the half-open probe; a batch of reports costs one prepared UPDATE per source it names,
sent together and committed once, never one per run.
"""

from __future__ import annotations

import functools
from bisect import bisect_right
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from orchestrator.coordination import policy, routing, spend
from orchestrator.coordination.registry import registry
from orchestrator.models import Run, SourceHealth
from orchestrator.vocabulary import RETRYABLE

Breaker = SourceHealth.Breaker
# The failures that say the source itself is in trouble (it timed out, broke, asked to slow down,
# or gave no reliable signal): they count toward the breaker. Any other failure (a 401, a 403, a
# 404, a 400 or 422) is the source answering and refusing this one request: like a success, it
# ends a streak of failures and closes the breaker (it refunds no retry tokens: nothing was served).
# The streak counts requests, not calls: a retry that fails again is the same request failing,
# which the routing policy's attempts and the retry budget already bound; different requests
# failing in a row are what says the source is down. (A half-open breaker's probes are mostly
# retries: every failure of a probe counts there.)
BREAKER_TYPES = RETRYABLE
# A half-open breaker lets this many probes through (at most its threshold), so that one request
# that fails on its own (a query the source keeps failing) cannot hold a working source shut for
# another cool-down: the first answer that shows the source up closes the breaker (whenever it
# comes), and a failure once all the probes were let through opens it again.
BREAKER_PROBES = 3
# How often a caller held back by a half-open breaker asks again, at the latest: the probe that
# closes the breaker wakes the callers it held back (`wake_deferred`) at once.
PROBE_RECHECK = 5.0


def health(source: str) -> SourceHealth:
    row, _ = SourceHealth.objects.get_or_create(source=source)
    return row


def state(source: str) -> routing.Budget:
    return _budget_of(health(source))


def _budget_of(h: SourceHealth) -> routing.Budget:
    return routing.Budget(
        source=h.source,
        tokens=h.budget_tokens,
        capacity=h.budget_capacity,
        retry_cost=h.retry_cost,
        timeout_retry_cost=h.timeout_retry_cost,
        breaker=h.breaker_state,
        opened_at=h.opened_at,
        cooldown=h.breaker_cooldown,
        not_before=h.not_before,
    )


def decide(
    failure: Any,
    attempt: int,
    context: routing.Context,
    *,
    now: datetime,
    pay: bool = True,
    unrecorded: Answer | None = None,
) -> routing.Decision:
    """Route `failure`, which ended attempt `attempt` on `context.source`, with the current policy
    and the source's live budget, breaker and hold: the same call for local recovery, the built-in
    coordinator and agents. With `pay`, a retry or a wait takes its tokens; if another caller took
    them first, the decision is taken again as with an empty budget. `unrecorded` is the answer
    behind `failure` when it is not recorded yet (local recovery asks before its run's outcome is):
    routing sees the source as it will be once it is. A source or an agent (`context.agent`) past
    its daily spend limit (`spend.over_budget`) gets the policy's `over_budget_action` instead of
    any decision that would call again."""
    h = health(context.source)
    live = _budget_of(h) if unrecorded is None else _as_recorded(h, unrecorded)
    if not context.over_budget:
        # Past its source's or its agent's daily spend limit: escalate or abort, as the policy says.
        over = spend.over_budget(context.source, context.agent, now)
        context = replace(context, over_budget=over)
    snap = policy.current_snapshot(context.project_id)  # with the project's overrides
    decision = routing.decide(failure, attempt, snap, live, context, now=now)
    if pay and decision.calls_again and not try_spend(context.source, decision.budget_cost):
        decision = routing.decide(failure, attempt, snap, replace(live, tokens=0), context, now=now)
    return decision


def _as_recorded(h: SourceHealth, answer: Answer) -> routing.Budget:
    """The source's state once `answer` is recorded, as `record` would leave it."""
    live = _budget_of(h)
    if answer.hold is not None:
        live = replace(live, not_before=max(h.not_before or answer.hold[1], answer.hold[1]))
    if answer.up:
        live = replace(live, breaker=Breaker.CLOSED, opened_at=None)
    elif answer.failure_type in BREAKER_TYPES:
        if h.breaker_state == Breaker.HALF_OPEN:
            trips = h.consecutive_failures >= min(BREAKER_PROBES, h.breaker_threshold)
        else:
            closed = h.breaker_state == Breaker.CLOSED and not answer.retry
            trips = closed and h.consecutive_failures + 1 >= h.breaker_threshold
        if trips:
            live = replace(live, breaker=Breaker.OPEN, opened_at=answer.at)
    return live


def try_spend(source: str, cost: float) -> bool:
    """Take `cost` tokens for a retry; False if the bucket holds fewer (someone else took them)."""
    if cost <= 0:
        return True
    health(source)
    changed = SourceHealth.objects.filter(source=source, budget_tokens__gte=cost).update(
        budget_tokens=F("budget_tokens") - cost
    )
    return bool(changed)


class Answer(NamedTuple):
    """One answer of a source to a call: a success, or a failure with its type and Retry-After,
    given at `at`. (A tuple: a batch makes one per run.) A failure without a type only holds;
    `retry`: the answer to a later attempt of a request that failed before."""

    source: str
    ok: bool
    at: datetime
    failure_type: str | None = None
    retry_after: float | None = None
    retry: bool = False

    @property
    def up(self) -> bool:
        """Whether the answer shows the source up: a success, or a refusal of this request."""
        return self.ok or (self.failure_type is not None and self.failure_type not in BREAKER_TYPES)

    @property
    def hold(self) -> tuple[datetime, datetime] | None:
        if self.ok or not self.retry_after or self.retry_after <= 0:
            return None
        return self.at, self.at + timedelta(seconds=self.retry_after)


def record(answers: Iterable[Answer], now: datetime, known: Iterable[str] = ()) -> set[str]:
    """Feed answers to their sources' breakers, budgets and holds, in the order they were given:
    one UPDATE a source, in one transaction (`known`: sources whose row exists, read just
    before). An answer that shows the source up (a success, or a refusal of the request) closes
    the breaker, and a success refunds; the failures after the last such answer count toward the
    breaker; a Retry-After holds back every caller. Return the sources whose open or half-open
    breaker these answers closed (their held-back callers may go: `wake_deferred`)."""
    by_source: dict[str, list[Answer]] = {}
    for answer in answers:
        by_source.setdefault(answer.source, []).append(answer)
    rows = [_told(source, by_source[source], now) for source in sorted(by_source)]
    rows = [row for row in rows if row["up"] or row["told"]]
    if not rows:
        return set()
    missing = {row["source"] for row in rows if row["told"]} - set(known)
    if missing:
        fresh = [SourceHealth(source=source) for source in sorted(missing)]
        SourceHealth.objects.bulk_create(fresh, ignore_conflicts=True)
    closed: set[str] = set()
    # One commit for all; sorted by source, so concurrent writers lock the rows in one order.
    atomic = transaction.atomic() if len(rows) > 1 else nullcontext()
    with atomic, connection.cursor() as cursor:
        for row in rows:
            cursor.execute(_record_sql(), row)
            closed.update(source for source, now_closed in cursor.fetchall() if now_closed)
    return closed


def _told(source: str, answers: list[Answer], now: datetime) -> dict[str, Any]:
    """The parameters of `_record_sql` for one source's answers."""
    answers.sort(key=lambda a: a.at)
    last_up = max((i for i, a in enumerate(answers) if a.up), default=-1)
    failures = [a for a in answers[last_up + 1 :] if a.failure_type in BREAKER_TYPES]
    failed = sum(not a.retry for a in failures)
    holds = [h for a in answers if (h := a.hold) is not None and h[1] > now]
    adapt = connection.ops.adapt_datetimefield_value
    return {
        "source": source,
        "ok": sum(a.ok for a in answers),
        "up": sum(a.up for a in answers),
        "probes": BREAKER_PROBES,
        "failed": failed,
        "failures": len(failures),
        "told": bool(failures or holds),
        "now": adapt(now),
        "start": adapt(min(h[0] for h in holds)) if holds else None,
        "until": adapt(max(h[1] for h in holds)) if holds else None,
    }


@functools.cache
def _record_sql() -> str:
    """What `record` writes. The breaker: an answer that shows the source up closes it and the
    failures after the last one count from zero (`failed`: of first attempts; `failures`: all);
    they trip a closed breaker at its threshold, and any failure a half-open one once all its
    probes were let through (their count is taken in advance, in `consecutive_failures`, by
    `admission`). A success refunds. The hold: a later one wins; one
    that begins after the last ended starts a new window. Only a source that has something to
    forgive is written by successes alone. It returns the source, and whether these answers
    closed its breaker (`closed_at` is then theirs)."""
    q = connection.ops.quote_name
    table, source = q(SourceHealth._meta.db_table), q("source")
    count, state, opened = q("consecutive_failures"), q("breaker_state"), q("opened_at")
    threshold, tokens, capacity = q("breaker_threshold"), q("budget_tokens"), q("budget_capacity")
    refund, since, until = q("success_refund"), q("hold_from"), q("not_before")
    closed_at = q("closed_at")
    closed, half, open_ = (
        f"'{b.value}'" for b in (Breaker.CLOSED, Breaker.HALF_OPEN, Breaker.OPEN)
    )
    probes = f"CASE WHEN {threshold} < %(probes)s THEN {threshold} ELSE %(probes)s END"
    trips = (
        f"(%(up)s > 0 AND %(failed)s > 0 AND {threshold} <= %(failed)s) OR (%(up)s = 0 AND "
        f"(({state} = {half} AND %(failures)s > 0 AND {count} >= {probes}) "
        f"OR ({state} = {closed} AND %(failed)s > 0 AND {threshold} <= {count} + %(failed)s)))"
    )
    refunded = f"{tokens} + {refund} * %(ok)s"
    return (
        f"UPDATE {table} SET "
        f"{count} = CASE WHEN %(up)s > 0 THEN %(failed)s WHEN {state} = {half} THEN {count} "
        f"ELSE {count} + %(failed)s END, "
        f"{state} = CASE WHEN {trips} THEN {open_} WHEN %(up)s > 0 THEN {closed} "
        f"ELSE {state} END, "
        f"{opened} = CASE WHEN {trips} THEN %(now)s WHEN %(up)s > 0 THEN NULL ELSE {opened} END, "
        f"{closed_at} = CASE WHEN {trips} THEN {closed_at} "
        f"WHEN %(up)s > 0 AND {state} <> {closed} THEN %(now)s ELSE {closed_at} END, "
        f"{tokens} = CASE WHEN %(ok)s = 0 THEN {tokens} WHEN {refunded} < {capacity} "
        f"THEN {refunded} ELSE {capacity} END, "
        f"{since} = CASE WHEN %(until)s IS NULL THEN {since} "
        f"WHEN {until} IS NULL OR {until} < %(start)s THEN %(start)s "
        f"WHEN {since} IS NULL OR {since} > %(start)s THEN %(start)s ELSE {since} END, "
        f"{until} = CASE WHEN %(until)s IS NULL THEN {until} "
        f"WHEN {until} IS NULL OR {until} < %(until)s THEN %(until)s ELSE {until} END "
        f"WHERE {source} = %(source)s AND (%(told)s OR {count} > 0 OR {state} <> {closed} "
        f"OR (%(ok)s > 0 AND {tokens} < {capacity})) "
        f"RETURNING {source}, CASE WHEN {closed_at} = %(now)s THEN 1 ELSE 0 END"
    )


def wake_deferred(source: str, now: datetime) -> int:
    """If `source`'s breaker is closed, make the runs its admission held back (queued again after
    being sent, due at their next look) due now, or at its hold's end; return how many. Called
    by whatever closed it: a half-open breaker's probe once it has answered, or an agent's report
    that found the source up; the callers held back need not wait for their next look."""
    row = health(source)
    if row.breaker_state != Breaker.CLOSED:
        return 0
    due = max(now, row.not_before or now)
    held = Run.objects.filter(
        source=source, status=Run.Status.QUEUED, dispatched_at__isnull=False, due_at__gt=due
    )
    return held.update(due_at=due)


def disable(source: str, reason: str, now: datetime) -> None:
    """Mark `source` switched away from until a person repairs it (kept if it already is)."""
    health(source)
    SourceHealth.objects.filter(source=source, disabled_at__isnull=True).update(
        disabled_at=now, disabled_reason=reason[:300]
    )


def disabled_sources() -> set[str]:
    return set(
        SourceHealth.objects.filter(disabled_at__isnull=False).values_list("source", flat=True)
    )


def reenable(source: str, now: datetime) -> tuple[SourceHealth, dict[str, Any]]:
    """A person repaired `source`: clear its disabling, its Retry-After hold and its breaker,
    and wake the runs its breaker held back; return its row and its state before."""
    row = health(source)
    before = row.repair_state()
    SourceHealth.objects.filter(pk=row.pk).update(
        disabled_at=None,
        disabled_reason="",
        not_before=None,
        hold_from=None,
        breaker_state=Breaker.CLOSED,
        consecutive_failures=0,
        opened_at=None,
    )
    row.refresh_from_db()
    wake_deferred(source, now)
    return row, before


def record_success(source: str, now: datetime | None = None) -> None:
    now = now or timezone.now()
    record([Answer(source, True, now)], now)


def record_failure(
    source: str, failure_type: str, now: datetime, retry_after: float | None = None
) -> None:
    """Count a failure toward the breaker; remember a provider's Retry-After for every caller."""
    record([Answer(source, False, now, failure_type, retry_after)], now)


@functools.lru_cache(maxsize=64)
def _holds_sql(count: int) -> str:
    q = connection.ops.quote_name
    names = ", ".join(["%s"] * count)
    return (
        f"SELECT {q('source')}, {q('hold_from')}, {q('not_before')} "
        f"FROM {q(SourceHealth._meta.db_table)} WHERE {q('source')} IN ({names})"
    )


def _aware(value: datetime | None) -> datetime | None:
    """A timestamp read by a plain statement: PostgreSQL's is aware; SQLite's is naive, in the
    connection's time zone (as the ORM reads it)."""
    if value is not None and timezone.is_naive(value):
        value = timezone.make_aware(value, connection.timezone)
    return value


class Holds:
    """The Retry-After holds of some sources as windows [from, until): was a call started when
    one of them should have prevented it? (The overview's "early" calls, whatever their query.)"""

    def __init__(self) -> None:
        self._windows: dict[str, list[tuple[datetime, datetime]]] = {}
        self._merged: dict[str, tuple[list[datetime], list[datetime]]] = {}
        self.known: set[str] = set()  # the sources read that have a row

    @classmethod
    def current(cls, sources: Iterable[str], since: datetime) -> Holds:
        """The holds stored for `sources` that last beyond `since`. Every report that says when
        its call started asks this: one plain statement, as `record`'s, since building it
        through the ORM cost about as much CPU as the rest of a single report's feed."""
        holds = cls()
        names = sorted(set(sources))
        if not names:
            return holds
        with connection.cursor() as cursor:
            cursor.execute(_holds_sql(len(names)), names)
            rows = cursor.fetchall()
        for source, start, until in rows:
            holds.known.add(source)
            start, until = _aware(start), _aware(until)
            if start is not None and until is not None and until > since:
                holds.add(source, start, until)
        return holds

    def __bool__(self) -> bool:
        return bool(self._windows)

    def add(self, source: str, start: datetime, until: datetime) -> None:
        self._windows.setdefault(source, []).append((start, until))
        self._merged.pop(source, None)

    def covering(self, source: str, moment: datetime) -> datetime | None:
        """The end of the hold of `source` that `moment` is strictly inside (the answer that began
        it, at its start, is not), else None."""
        if source not in self._windows:
            return None
        if source not in self._merged:
            self._merged[source] = _merge(self._windows[source])
        starts, ends = self._merged[source]
        i = bisect_right(starts, moment) - 1
        return ends[i] if i >= 0 and starts[i] < moment < ends[i] else None


def _merge(windows: list[tuple[datetime, datetime]]) -> tuple[list[datetime], list[datetime]]:
    starts: list[datetime] = []
    ends: list[datetime] = []
    for start, until in sorted(windows):
        if ends and start <= ends[-1]:
            ends[-1] = max(ends[-1], until)
        else:
            starts.append(start)
            ends.append(until)
    return starts, ends


class Admission(NamedTuple):
    """Whether a call to a source may go now (`wait` None) or when to ask again, and whether the
    call is one of its half-open breaker's probes."""

    wait: datetime | None
    probe: bool = False


def admit(source: str, now: datetime) -> datetime | None:
    """Return None if a call to `source` may go now, else when to ask again."""
    return admission(source, now).wait


def admission(source: str, now: datetime) -> Admission:
    """May a call to `source` go now? Not inside its Retry-After hold (until its end, exactly),
    nor while its breaker is open (until the cool-down ends, exactly). Then the breaker is
    half-open and lets `BREAKER_PROBES` callers through (at most its threshold); the others ask
    again when the probes have answered (the one that closes the breaker wakes them) or after
    `PROBE_RECHECK`, and a round whose probes are all lost for a whole cool-down starts again."""
    for _ in range(3):  # a lost race re-reads the row: another caller changed it just now
        h = health(source)
        if h.not_before and h.not_before > now:
            return Admission(h.not_before)
        if h.breaker_state == Breaker.CLOSED:
            return Admission(None)
        reopen = (h.opened_at or now) + timedelta(seconds=h.breaker_cooldown)
        if now >= reopen:
            # Cool-down over (or the probes lost): a new round of probes, this caller the first.
            rows = SourceHealth.objects.filter(
                pk=h.pk, breaker_state=h.breaker_state, opened_at=h.opened_at
            )
            if rows.update(breaker_state=Breaker.HALF_OPEN, opened_at=now, consecutive_failures=1):
                return Admission(None, probe=True)
            continue
        if h.breaker_state == Breaker.OPEN:
            return Admission(reopen)
        # Half-open: `consecutive_failures` counts the round's probes, each a failure until it
        # answers otherwise (see _record_sql).
        probes = min(BREAKER_PROBES, h.breaker_threshold)
        if h.consecutive_failures >= probes:
            return Admission(min(reopen, _recheck(now)))
        rows = SourceHealth.objects.filter(
            pk=h.pk,
            breaker_state=Breaker.HALF_OPEN,
            opened_at=h.opened_at,
            consecutive_failures__lt=probes,
        )
        if rows.update(consecutive_failures=F("consecutive_failures") + 1):
            return Admission(None, probe=True)
    return Admission(_recheck(now))


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
