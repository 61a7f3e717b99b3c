"""A routing table's dry run: the last days' stored failures replayed through `routing.decide`
under a proposed table and under the current one, before the proposal is saved.

The failures are read grouped by what routing reads (a deterministic sample of ids above
`SAMPLE_ABOVE`). A replayed retry or switch recovers a run at the rate recorded ones of that type
on that source succeeded (else of that type, else of that action), and is a wasted call otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from orchestrator.coordination import routing
from orchestrator.coordination.policy import current_snapshot
from orchestrator.models import ProjectPolicy, Run, RunSets
from orchestrator.vocabulary import Action, FailureCategory

SAMPLE_ABOVE = 100_000
OUTCOMES_ABOVE = 10_000
SAMPLE_BUCKETS = 1000
DEFAULT_DAYS = 7
MAX_DAYS = 90
ATTEMPT_CAP = 21  # beyond the most attempts a rule allows (20), attempts route alike


@dataclass(frozen=True)
class FailureKey:
    failure_type: str
    source: str
    attempt: int
    retryable: bool | None
    retry_after: float | None
    partial: bool
    recorded: str


@dataclass(frozen=True)
class History:
    since: datetime
    until: datetime
    days: float
    failures: int
    read: int  # all, or the sample
    groups: Mapping[FailureKey, int]
    fraction: float
    # (action, failure_type, source) -> (decisions recorded, of them followed by a success)
    outcomes: Mapping[tuple[str, str, str], tuple[int, int]]

    @property
    def sampled(self) -> bool:
        return self.fraction < 1

    @property
    def scale(self) -> float:
        return self.failures / self.read if self.read else 1.0

    def switchable(self) -> set[str]:
        return {k.source for k in self.groups if k.recorded == Action.SWITCH_SOURCE}

    def refreshable(self) -> set[str]:
        auth = FailureCategory.AUTH_FAILURE
        return {
            k.source for k in self.groups if k.failure_type == auth and k.recorded == Action.RETRY
        }


@dataclass
class Figures:
    failures: float = 0
    retries: float = 0
    waiting_seconds: float = 0
    switches: float = 0
    escalations: float = 0
    escalations_per_day: float = 0
    aborts: float = 0
    accepted_partial: float = 0
    expected_wasted_calls: float = 0
    expected_recovered: float = 0
    by_failure_type: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        return {k: round(v, 2) if isinstance(v, float) else v for k, v in out.items()}

    NUMBERS = (
        "retries",
        "waiting_seconds",
        "switches",
        "escalations",
        "escalations_per_day",
        "aborts",
        "accepted_partial",
        "expected_wasted_calls",
        "expected_recovered",
    )

    def add(self, other: Figures) -> None:
        """Add another history's figures to these (`escalations_per_day` is worked out after)."""
        self.failures += other.failures
        for name in self.NUMBERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for ftype, actions in other.by_failure_type.items():
            mine = self.by_failure_type.setdefault(ftype, {})
            for action, n in actions.items():
                mine[action] = mine.get(action, 0) + n

    def minus(self, other: Figures) -> dict[str, float]:
        return {k: round(getattr(self, k) - getattr(other, k), 2) for k in self.NUMBERS}


def window(days: float, now: datetime | None = None) -> tuple[datetime, datetime]:
    until = now or timezone.now()
    return until - timedelta(days=days), until


def load_history(
    days: float = DEFAULT_DAYS, now: datetime | None = None, project_id: int | None = None
) -> History:
    """The window's failures (of `project_id`'s runs only, if given)."""
    since, until = window(days, now)
    failures = Run.objects.filter(RunSets.FAILURES, created_at__gte=since, created_at__lt=until)
    if project_id is not None:
        failures = failures.filter(project_id=project_id)
    total = failures.count()
    keep = SAMPLE_BUCKETS
    if total > SAMPLE_ABOVE:
        keep = max(1, math.ceil(SAMPLE_BUCKETS * SAMPLE_ABOVE / total))
    # An index lookup per recorded decision: a smaller sample estimates the rates.
    outcome_keep = min(keep, max(1, math.ceil(SAMPLE_BUCKETS * OUTCOMES_ABOVE / max(total, 1))))
    groups, outcomes = _read(since, until, keep, outcome_keep, project_id)
    read = sum(groups.values()) if keep < SAMPLE_BUCKETS else total
    return History(since, until, days, total, read, groups, keep / SAMPLE_BUCKETS, outcomes)


# What followed each sampled retry or switch is a scalar subquery on the (retry_of, attempt) and
# switched_from indexes: a join would let the planner hash the whole table instead.
_READ_SQL = """
SELECT failure_type, source, attempt, retryable, CEILING(retry_after),
       CASE WHEN partial_count > 0 THEN 1 ELSE 0 END, decision,
       COUNT(*),
       SUM(CASE WHEN next_status IN {finished} THEN 1 ELSE 0 END),
       SUM(CASE WHEN next_status = 'succeeded' THEN 1 ELSE 0 END),
       SUM(CASE WHEN switch_status IN {finished} THEN 1 ELSE 0 END),
       SUM(CASE WHEN switch_status = 'succeeded' THEN 1 ELSE 0 END)
FROM (
  SELECT f.failure_type, f.source, f.attempt, f.retryable, f.retry_after, f.partial_count,
         f.decision,
         CASE WHEN f.decision = 'retry' AND MOD(f.id, %(buckets)s) < %(outcome_keep)s THEN
           (SELECT n.status FROM orchestrator_run n
            WHERE n.retry_of_id = COALESCE(f.retry_of_id, f.id) AND n.attempt = f.attempt + 1)
         END AS next_status,
         CASE WHEN f.decision = 'switch_source' AND MOD(f.id, %(buckets)s) < %(outcome_keep)s THEN
           (SELECT s.status FROM orchestrator_run s WHERE s.switched_from_id = f.id LIMIT 1)
         END AS switch_status
  FROM orchestrator_run f
  WHERE f.status IN ('failed', 'escalated')
    AND f.created_at >= %(since)s AND f.created_at < %(until)s
    AND MOD(f.id, %(buckets)s) < %(keep)s{project}
) AS failures
GROUP BY 1, 2, 3, 4, 5, 6, 7
"""
_FINISHED = "('succeeded', 'failed', 'escalated', 'skipped', 'cancelled')"
_READ_ALL = _READ_SQL.format(finished=_FINISHED, project="")
# One project's failures (a retry or a switched run is its first attempt's project's).
_READ_PROJECT = _READ_SQL.format(finished=_FINISHED, project="\n    AND f.project_id = %(project)s")


def _read(
    since: datetime, until: datetime, keep: int, outcome_keep: int, project_id: int | None = None
) -> tuple[dict[FailureKey, int], dict[tuple[str, str, str], tuple[int, int]]]:
    params = {
        "buckets": SAMPLE_BUCKETS,
        "keep": keep,
        "outcome_keep": outcome_keep,
        "since": since,
        "until": until,
        "project": project_id,
    }
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # JIT compiling this query costs longer than running it.
            cursor.execute("SET LOCAL jit = off")
            cursor.execute("SET LOCAL work_mem = '32MB'")
        cursor.execute(_READ_ALL if project_id is None else _READ_PROJECT, params)
        rows = cursor.fetchall()
    groups: dict[FailureKey, int] = {}
    outcomes: dict[tuple[str, str, str], tuple[int, int]] = {}
    for ftype, source, attempt, retryable, ra, partial, decision, *counts in rows:
        key = FailureKey(
            ftype or FailureCategory.UNCLASSIFIED,
            source,
            min(attempt, ATTEMPT_CAP),
            None if retryable is None else bool(retryable),
            None if ra is None else float(ra),
            bool(partial),
            decision or "",
        )
        n, retried, retried_ok, switched, switched_ok = (int(c or 0) for c in counts)
        groups[key] = groups.get(key, 0) + n
        for action, tried, ok in (
            (Action.RETRY, retried, retried_ok),
            (Action.SWITCH_SOURCE, switched, switched_ok),
        ):
            if tried:
                at = (str(action), key.failure_type, source)
                before = outcomes.get(at, (0, 0))
                outcomes[at] = (before[0] + tried, before[1] + ok)
    return groups, outcomes


def _middle() -> float:
    return 0.5  # the jitter's expected value: full jitter's mean is half the cap


class Rates:
    def __init__(self, outcomes: Mapping[tuple[str, str, str], tuple[int, int]]) -> None:
        self.exact = dict(outcomes)
        self.by_type: dict[tuple[str, str], list[int]] = {}
        self.by_action: dict[str, list[int]] = {}
        for (action, ftype, _), (tried, ok) in outcomes.items():
            for table, key in ((self.by_type, (action, ftype)), (self.by_action, action)):
                acc = table.setdefault(key, [0, 0])  # type: ignore[arg-type]
                acc[0] += tried
                acc[1] += ok

    def rate(self, action: str, ftype: str, source: str) -> float:
        for found in (
            self.exact.get((action, ftype, source)),
            self.by_type.get((action, ftype)),
            self.by_action.get(action),
        ):
            if found and found[0]:
                return found[1] / found[0]
        return 0.0


def replay(history: History, snapshot: routing.PolicySnapshot) -> Figures:
    """Return what `snapshot` decides for the history's failures."""
    rates = Rates(history.outcomes)
    switchable, refreshable = history.switchable(), history.refreshable()
    figures = Figures()
    scale = history.scale
    for key, count in history.groups.items():
        n = count * scale
        decision = routing.decide(
            {
                "failure_type": key.failure_type,
                "retryable": key.retryable,
                "retry_after": key.retry_after,
            },
            key.attempt,
            snapshot,
            context=_context(key, switchable, refreshable),
            rng=_middle,
        )
        _count(figures, key, n, decision, rates)
    figures.escalations_per_day = figures.escalations / history.days if history.days else 0.0
    return figures


def _context(key: FailureKey, switchable: set[str], refreshable: set[str]) -> routing.Context:
    auth = key.failure_type == FailureCategory.AUTH_FAILURE
    return routing.Context(
        source=key.source,
        has_alternative=key.source in switchable,
        can_refresh=key.source in refreshable,
        refreshed=auth and key.attempt > 1,
        partial_count=1 if key.partial else 0,
    )


def _count(figures: Figures, key: FailureKey, n: float, d: routing.Decision, rates: Rates) -> None:
    figures.failures += n
    per_type = figures.by_failure_type.setdefault(key.failure_type, {})
    per_type[d.action] = per_type.get(d.action, 0) + n
    if d.action in (Action.RETRY, Action.SWITCH_SOURCE):
        p = rates.rate(d.action, key.failure_type, key.source)
        figures.expected_recovered += n * p
        figures.expected_wasted_calls += n * (1 - p)
    if d.action == Action.RETRY:
        figures.retries += n
        figures.waiting_seconds += n * d.delay_seconds
    elif d.action == Action.SWITCH_SOURCE:
        figures.switches += n
    elif d.action == Action.ESCALATE:
        figures.escalations += n
    elif d.action == Action.ABORT:
        figures.aborts += n
    else:
        figures.accepted_partial += n


def proposed_snapshot(
    current: routing.PolicySnapshot, rows: Iterable[Mapping[str, Any]]
) -> routing.PolicySnapshot:
    """Return the current table with `rows` (any subset of a rule's fields) over it."""
    rules = dict(current.rules)
    for row in rows:
        ftype = row["failure_type"]
        base = asdict(rules[ftype]) if ftype in rules else {"failure_type": ftype}
        rules[ftype] = routing.Rule.from_data({**base, **row})
    return routing.PolicySnapshot(version=current.version, rules=rules)


def compare(
    history: History, current: routing.PolicySnapshot, proposed: routing.PolicySnapshot
) -> dict[str, Any]:
    """Return both tables' figures over one history and their difference."""
    now_figures, new_figures = replay(history, current), replay(history, proposed)
    return {
        "since": history.since,
        "until": history.until,
        "days": history.days,
        "failures": history.failures,
        "sampled": history.sampled,
        "sample_size": history.read,
        "evidence": {
            str(action): sum(t for (a, _, _), (t, _) in history.outcomes.items() if a == action)
            for action in (Action.RETRY, Action.SWITCH_SOURCE)
        },
        "current_version": current.version,
        "current": now_figures.as_dict(),
        "proposed": new_figures.as_dict(),
        "difference": new_figures.minus(now_figures),
    }


def dry_run(
    rows: Iterable[Mapping[str, Any]],
    days: float = DEFAULT_DAYS,
    now: datetime | None = None,
    projects: Iterable[int] | None = None,
    global_rows: bool = False,
) -> dict[str, Any]:
    """Replay the last `days` of failures under the current table with `rows` over it: every
    project's failures under the global table (`projects` None), or each of `projects`' failures
    under its own table (its `ProjectPolicy` rows over the global ones), the figures added up.
    `global_rows`: `rows` are the global table's, so a project overriding a failure type keeps
    its own row for it (the proposal changes nothing there)."""
    rows = list(rows)
    if projects is None:
        current = current_snapshot()
        return compare(load_history(days, now), current, proposed_snapshot(current, rows))
    ids = sorted(set(projects))
    own: dict[int, set[str]] = {}
    if global_rows:
        for project_id, ftype in ProjectPolicy.objects.filter(project_id__in=ids).values_list(
            "project_id", "failure_type"
        ):
            own.setdefault(project_id, set()).add(ftype)
    parts = []
    for project_id in ids:
        current = current_snapshot(project_id)
        mine = [r for r in rows if r["failure_type"] not in own.get(project_id, set())]
        history = load_history(days, now, project_id)
        parts.append((history, current, proposed_snapshot(current, mine)))
    return _added(parts, days, now)


def _added(
    parts: list[tuple[History, routing.PolicySnapshot, routing.PolicySnapshot]],
    days: float,
    now: datetime | None,
) -> dict[str, Any]:
    """`compare`'s answer for several projects' histories, each under its own tables."""
    since, until = window(days, now)
    current, proposed = Figures(), Figures()
    evidence = {str(Action.RETRY): 0, str(Action.SWITCH_SOURCE): 0}
    failures = read = 0
    sampled = False
    version = parts[0][1].version if parts else current_snapshot().version
    for history, now_table, new_table in parts:
        since, until = history.since, history.until
        current.add(replay(history, now_table))
        proposed.add(replay(history, new_table))
        failures += history.failures
        read += history.read
        sampled = sampled or history.sampled
        for (action, _, _), (tried, _) in history.outcomes.items():
            if action in evidence:
                evidence[action] += tried
    for figures in (current, proposed):
        figures.escalations_per_day = figures.escalations / days if days else 0.0
    return {
        "since": since,
        "until": until,
        "days": days,
        "failures": failures,
        "sampled": sampled,
        "sample_size": read,
        "evidence": evidence,
        "current_version": version,
        "current": current.as_dict(),
        "proposed": proposed.as_dict(),
        "difference": proposed.minus(current),
    }
