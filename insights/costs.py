"""What failures cost over a window: spend, wasted spend, spend avoided and time lost, per failure
type, source, agent (and project, where runs carry one), each amount the sum over a named set of
runs, so that a number links to the runs list showing exactly those runs (`SETS`).

Definitions (docs/operations.md, "What failures cost"):

* **spend**: the cost of the runs created in the window (in COST_CURRENCY; runs in another
  currency are counted apart, never added), each under its own failure type ("" for a run that did
  not fail), source and agent.
* **wasted spend**: the cost of the retries that failed again (`RunSets.WASTED_RETRIES`; a futile
  retry that failed again is one of them, and one that succeeded against its failure's signal
  recovered the call and is not counted), plus the share of a retry's or a switched run's cost
  spent fetching again what the failure it followed had already gathered: cost * (its results
  equal to an item of that failure's partial results) / (its results).
* **spend avoided**, and **time avoided**: what the status-aware baseline (`insights.baseline`:
  a retry library retrying only what the failure's verdict calls retryable, up to 3 attempts in
  all, after the call's own Retry-After; the status-aware arm of `benchmarks/recovery.py`) would
  have spent, and the time its retries would have taken, on the failures routing did not retry
  (`RunSets.AVOIDED_RETRIES`) that it would have retried (`AVOIDED_SPEND`): each retry costs what
  the failed call cost, takes its wait and as long as the failed call, and is made while the
  previous one failed: with k retries left and a recovery rate p, cost * (1 + (1 - p) + … +
  (1 - p)^(k-1)). p is the share of the window's recorded retries of that type and source (else
  type, else all) that succeeded, as the dry run reads it (`dryrun.Rates`). A failure the baseline
  would not retry either (an auth failure, a missing resource, one that said a retry cannot help)
  avoided nothing.
* **time lost**: per failure, from its finish to the next thing that moved its task on: the end of
  the run that followed it (a retry or a switched run, whether it succeeded or failed: a failure
  after it takes over from its own finish, so a task's failures add up to its whole delay without
  counting a second twice), else its decision (an accepted partial, an abort, a switch with no
  run) or its review's resolution, else its workflow's settlement; cut short where its workflow's
  topic succeeded meanwhile (0 when the topic had succeeded already). Still open: up to `now`. It
  splits into **waiting for a provider** (the part of the decision's delay the provider set: a
  `wait` for a source's Retry-After hold or open breaker, or a retry's Retry-After), **waiting for
  a human** (its review item, escalation to resolution, inside the delay) and **work** (the rest:
  backoff, dispatch, the next call itself).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Exists, Min, OuterRef, Q, Sum
from django.utils import timezone

from insights import baseline, minutes
from insights.stats import Window
from orchestrator.analytics.dryrun import Rates
from orchestrator.models import ReviewItem, Run, RunSets, Workflow
from orchestrator.models.run_queries import CREATED_AFTER_MARGIN
from orchestrator.vocabulary import Action

ZERO = Decimal(0)
MICRO = Decimal("0.000001")
COST = "cost"
CURRENCY = "cost_currency"
# How old a window's cached report may be before a page computes it again (beat's `warm_costs`
# computes them every minute, so pages seldom do): a longer window costs more to compute.
STALE_SECONDS = {"1h": 60, "24h": 120, "7d": 600}


def has_project() -> bool:
    """Whether runs carry a project (a foreign key `project`): then it is a dimension too."""
    return any(f.name == "project" for f in Run._meta.get_fields())


def dimensions() -> tuple[str, ...]:
    return ("failure_type", "source", "agent", *(("project",) if has_project() else ()))


def _dim_columns() -> list[str]:
    return ["failure_type", "source", "agent", *(["project_id"] if has_project() else [])]


# The named sets of runs behind each number (the runs list's `flag`s of the same names).

AVOIDED_SPEND = RunSets.AVOIDED_RETRIES & Q(attempt__lt=baseline.MAX_ATTEMPTS) & baseline.RETRIES


def priced(qs: Any) -> Any:
    """Runs with a cost in COST_CURRENCY."""
    return qs.filter(**{f"{COST}__isnull": False, CURRENCY: settings.COST_CURRENCY})


def avoided_spend(qs: Any) -> Any:
    """Failures routed elsewhere than a retry that the status-aware baseline would have retried."""
    return qs.filter(AVOIDED_SPEND)


def reviewed(qs: Any) -> Any:
    """Failures escalated to a human (a review item)."""
    return qs.filter(RunSets.FAILURES).filter(
        Exists(ReviewItem.objects.filter(run_id=OuterRef("pk")))
    )


def wasted_spend(qs: Any, since: datetime | None, now: datetime | None = None) -> Any:
    """Retries that failed again, and the runs that fetched again what a failure had gathered
    (found among the failures created from `since` on)."""
    ids = refetched(since or (now or timezone.now()) - timedelta(days=7), now)
    return qs.filter(RunSets.WASTED_RETRIES | Q(pk__in=sorted(ids)))


# The figures


@dataclass
class Delay:
    """The delay one failure caused, split three ways (seconds)."""

    total: float = 0.0
    provider: float = 0.0
    human: float = 0.0
    open: bool = False

    @property
    def work(self) -> float:
        return max(0.0, self.total - self.provider - self.human)


@dataclass
class Line:
    """One row of a table (or the total): amounts in COST_CURRENCY, times in seconds."""

    key: str = ""
    spend: Decimal = ZERO
    priced_runs: int = 0
    wasted: Decimal = ZERO
    wasted_runs: int = 0
    avoided: Decimal = ZERO
    avoided_runs: int = 0
    avoided_seconds: float = 0.0
    lost: float = 0.0
    provider: float = 0.0
    human: float = 0.0
    failures: int = 0
    reviewed: int = 0

    @property
    def work(self) -> float:
        return max(0.0, self.lost - self.provider - self.human)

    def add_delay(self, d: Delay, was_reviewed: bool) -> None:
        self.failures += 1
        self.reviewed += was_reviewed
        self.lost += d.total
        self.provider += d.provider
        self.human += d.human

    def as_row(self, dimension: str) -> dict[str, Any]:
        return {
            dimension: self.key,
            "spend": self.spend,
            "priced_runs": self.priced_runs,
            "wasted_spend": self.wasted,
            "wasted_runs": self.wasted_runs,
            "spend_avoided": self.avoided,
            "avoided_runs": self.avoided_runs,
            "time_avoided_seconds": round(self.avoided_seconds, 3),
            "time_lost_seconds": round(self.lost, 3),
            "provider_wait_seconds": round(self.provider, 3),
            "human_wait_seconds": round(self.human, 3),
            "work_seconds": round(self.work, 3),
            "failures": self.failures,
            "reviewed_failures": self.reviewed,
        }


@dataclass
class Report:
    since: datetime
    now: datetime
    currency: str
    total: Line = field(default_factory=Line)
    tables: dict[str, dict[str, Line]] = field(default_factory=dict)
    other_currency_runs: int = 0
    delays: dict[int, Delay] = field(default_factory=dict)
    refetched: dict[int, Decimal] = field(default_factory=dict)

    @property
    def spend_as_of(self) -> tuple[datetime, Decimal]:
        return self.now, self.total.spend

    def lines(self, dimension: str) -> list[Line]:
        """A table's rows, the costliest first (spend, then wasted spend, then time lost)."""
        rows = self.tables.get(dimension, {}).values()
        return sorted(rows, key=lambda r: (-r.spend, -r.wasted, -r.lost, r.key))

    def _line(self, dims: dict[str, str]) -> Iterable[Line]:
        yield self.total
        for dimension, value in dims.items():
            table = self.tables.setdefault(dimension, {})
            if value not in table:
                table[value] = Line(key=value)
            yield table[value]


def money(value: Decimal) -> Decimal:
    return value.quantize(MICRO, rounding=ROUND_HALF_EVEN)


def _dims(row: dict[str, Any]) -> dict[str, str]:
    out = {
        "failure_type": row["failure_type"] or "",
        "source": row["source"],
        "agent": row["agent"],
    }
    if "project_id" in row:
        out["project"] = "" if row["project_id"] is None else str(row["project_id"])
    return out


def report(
    since: datetime,
    now: datetime | None = None,
    keep_delays: bool = False,
    projects: tuple[int, ...] | None = None,
) -> Report:
    """The figures of the runs created from `since` on (the window of the runs list's `range`).
    The window's failures are read once, streamed (never all held at once); the retries and
    switched runs that followed them, review items and topics' successes are held by key.
    `keep_delays`: also keep each failure's `Delay` in `delays`; `projects`: only their runs (None:
    every project's), as the runs list a number links to shows them."""
    now = now or timezone.now()
    currency = settings.COST_CURRENCY
    out = Report(since=since, now=now, currency=currency)
    for dimension in dimensions():
        out.tables[dimension] = {}
    _spend(out, since, projects)
    successors = _successors(since, projects)
    _wasted(out, successors)
    waits = _Waits.load(since, projects)
    outcomes: dict[tuple[str, str, str], tuple[int, int]] = {}
    pairs: list[tuple[int, int]] = []
    avoided: list[tuple[dict[str, str], dict[str, Any], Decimal]] = []
    for f in _failures(since, projects).iterator(chunk_size=2000):
        following = _next_runs(f, successors)
        pairs += _pairs(f, following)
        _outcome(outcomes, f, successors)
        dims = _dims(f)
        if _avoiding(f):
            avoided.append((dims, f, _cost(f, currency)))
        review = waits.reviews.get(f["id"])
        d = delay(f, following, review, waits.settled, waits.topic_ok, now)
        if keep_delays:
            out.delays[f["id"]] = d
        for line in out._line(dims):
            line.add_delay(d, review is not None)
    _refetch_pairs(out, pairs, successors)
    _avoided(out, avoided, Rates(outcomes))
    return out


AVOIDING = frozenset(RunSets.AVOIDING_DECISIONS)


def _avoiding(f: dict[str, Any]) -> bool:
    """Whether failure `f` is in AVOIDED_SPEND (the same condition, in Python)."""
    early = f["attempt"] < baseline.MAX_ATTEMPTS
    return f["decision"] in AVOIDING and early and baseline.retries(f)


def _window(since: datetime, projects: tuple[int, ...] | None = None) -> Any:
    runs = Run.objects.filter(created_at__gte=since)
    return runs if projects is None else runs.filter(project_id__in=projects)


def _spend(out: Report, since: datetime, projects: tuple[int, ...] | None = None) -> None:
    dims = _dim_columns()
    rows = (
        _window(since, projects)
        .filter(**{f"{COST}__isnull": False})
        .values(*dims, CURRENCY)
        .annotate(amount=Sum(COST), n=Count("id"))
        .order_by()
    )
    for row in rows:
        if row[CURRENCY] != out.currency:
            out.other_currency_runs += row["n"]
            continue
        for line in out._line(_dims(row)):
            line.spend += money(row["amount"] or ZERO)
            line.priced_runs += row["n"]


FAILURE_FIELDS = (
    "id",
    "status",
    "attempt",
    "retry_of_id",
    "workflow_id",
    "topic",
    "finished_at",
    "created_at",
    "decision",
    "decided_at",
    "decision_delay",
    "retry_after",
    "retryable",
    "partial_count",
    "started_at",
)


def _failure_rows(since: datetime, projects: tuple[int, ...] | None = None) -> Any:
    return _window(since, projects).filter(RunSets.FAILURES)


def _failures(since: datetime, projects: tuple[int, ...] | None = None) -> Any:
    """The window's failures as dicts of what the figures read (a queryset: iterate it once)."""
    fields = (*FAILURE_FIELDS, *_dim_columns(), COST, CURRENCY)
    return _failure_rows(since, projects).values(*fields).order_by()


SUCCESSOR_FIELDS = (
    "id",
    "status",
    "attempt",
    "retry_of_id",
    "switched_from_id",
    "finished_at",
    "result_count",
)


def _successors(since: datetime, projects: tuple[int, ...] | None = None) -> dict[str, Any]:
    """The retries and switched runs created from `since` on, by what they followed."""
    fields = (*SUCCESSOR_FIELDS, *_dim_columns(), COST, CURRENCY)
    rows = (
        _window(since, projects)
        .filter(Q(retry_of__isnull=False) | Q(switched_from__isnull=False))
        .values(*fields)
        .order_by()
    )
    retry: dict[tuple[int, int], dict[str, Any]] = {}
    switch: dict[int, dict[str, Any]] = {}
    every: list[dict[str, Any]] = []
    for row in rows:
        every.append(row)
        if row["retry_of_id"] is not None:
            retry[(row["retry_of_id"], row["attempt"])] = row
        if row["switched_from_id"] is not None:
            switch.setdefault(row["switched_from_id"], row)
    return {"retry": retry, "switch": switch, "all": every}


def _next_runs(f: dict[str, Any], successors: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs that followed failure `f`: its next attempt and the run a switch started."""
    root = f["retry_of_id"] or f["id"]
    found = [successors["retry"].get((root, f["attempt"] + 1)), successors["switch"].get(f["id"])]
    return [n for n in found if n is not None]


def _cost(row: dict[str, Any], currency: str) -> Decimal:
    if row[COST] is None or row[CURRENCY] != currency:
        return ZERO
    return money(row[COST])


def _wasted(out: Report, successors: dict[str, Any]) -> None:
    failed = set(Run.FAILURE)
    for row in successors["all"]:
        if row["retry_of_id"] is None or row["status"] not in failed:
            continue
        for line in out._line(_dims(row)):
            line.wasted += _cost(row, out.currency)
            line.wasted_runs += 1


def _pairs(f: dict[str, Any], following: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(failure, run) for each run that followed failure `f` with results while `f` had partial
    results: the runs that may have fetched them again."""
    if not f["partial_count"]:
        return []
    failed = set(Run.FAILURE)
    return [
        (f["id"], n["id"]) for n in following if n["status"] not in failed and n["result_count"]
    ]


def _refetch(out: Report, failures: Iterable[dict[str, Any]], successors: dict[str, Any]) -> None:
    """Runs (not failed) that followed a failure with partial results and returned some of them
    again: the share of their cost those results took."""
    pairs = [pair for f in failures for pair in _pairs(f, _next_runs(f, successors))]
    _refetch_pairs(out, pairs, successors)


def _refetch_pairs(out: Report, pairs: list[tuple[int, int]], successors: dict[str, Any]) -> None:
    if not pairs:
        return
    ids = {pk for pair in pairs for pk in pair}
    rows = Run.objects.filter(pk__in=sorted(ids)).values_list("pk", "partial_results", "results")
    partial, results = {}, {}
    for pk, gathered, returned in rows:
        partial[pk] = {_canonical(item) for item in gathered or []}
        results[pk] = [_canonical(item) for item in returned or []]
    by_id = {n["id"]: n for n in successors["all"]}
    for failure_id, next_id in pairs:
        returned = results.get(next_id) or []
        again = sum(1 for item in returned if item in partial.get(failure_id, ()))
        if not again or next_id in out.refetched:
            continue
        n = by_id[next_id]
        share = money(_cost(n, out.currency) * again / len(returned))
        out.refetched[next_id] = share
        for line in out._line(_dims(n)):
            line.wasted += share
            line.wasted_runs += 1


def _canonical(item: Any) -> str:
    return json.dumps(item, sort_keys=True, separators=(",", ":"), default=str)


def refetched(since: datetime, now: datetime | None = None) -> set[int]:
    """The runs that fetched again what a failure created from `since` on had gathered."""
    out = Report(since=since, now=now or timezone.now(), currency=settings.COST_CURRENCY)
    _refetch(out, _failures(since), _successors(since))
    return set(out.refetched)


def refetch_shares(since: datetime, now: datetime | None = None) -> dict[int, Decimal]:
    """{run id: the share of its cost spent fetching again what a failure created from `since`
    on had gathered} (`refetched`, with the amounts: the wasted spend's second part)."""
    out = Report(since=since, now=now or timezone.now(), currency=settings.COST_CURRENCY)
    _refetch(out, _failures(since), _successors(since))
    return dict(out.refetched)


def _outcome(
    outcomes: dict[tuple[str, str, str], tuple[int, int]],
    f: dict[str, Any],
    successors: dict[str, Any],
) -> None:
    """Count a recorded retry of failure `f` that has finished, and whether it succeeded."""
    if f["decision"] != Action.RETRY:
        return
    root = f["retry_of_id"] or f["id"]
    n = successors["retry"].get((root, f["attempt"] + 1))
    if n is None or n["status"] not in FINISHED:
        return
    key = (str(Action.RETRY), f["failure_type"] or "", f["source"])
    tried, ok = outcomes.get(key, (0, 0))
    outcomes[key] = (tried + 1, ok + (n["status"] == Run.Status.SUCCEEDED))


FINISHED = frozenset({Run.Status.SUCCEEDED, *Run.FAILURE})


def _avoided(
    out: Report, avoided: list[tuple[dict[str, str], dict[str, Any], Decimal]], rates: Rates
) -> None:
    """Add what the status-aware baseline would have spent, and the time its retries would have
    taken, on each failure routed elsewhere that it would have retried."""
    for dims, f, cost in avoided:
        p = rates.rate(Action.RETRY, f["failure_type"] or "", f["source"])
        began, ended = f["started_at"] or f["created_at"], f["finished_at"] or f["created_at"]
        call = max(0.0, (ended - began).total_seconds())
        calls, seconds = baseline.expected(f["attempt"], p, f["retry_after"], call)
        amount = money(cost * Decimal(repr(calls)))
        for line in out._line(dims):
            line.avoided += amount
            line.avoided_runs += 1
            line.avoided_seconds += seconds


@dataclass
class _Waits:
    """What a failure's delay is read against: its review item, its workflow's settlement and
    when its workflow's topic succeeded (the workflows of the window's failures only)."""

    reviews: dict[int, tuple[datetime, datetime | None]]
    settled: dict[int, datetime | None]
    # (workflow, topic) -> when its first success finished
    topic_ok: dict[tuple[int, str], datetime]

    @classmethod
    def load(cls, since: datetime, projects: tuple[int, ...] | None = None) -> _Waits:
        reviews: dict[int, tuple[datetime, datetime | None]] = {}
        items = ReviewItem.objects.filter(created_at__gte=since - CREATED_AFTER_MARGIN)
        for run_id, opened, resolved in items.values_list(
            "run_id", "created_at", "resolved_at"
        ).order_by("created_at", "id"):
            reviews.setdefault(run_id, (opened, resolved))
        failures = _failure_rows(since, projects)
        workflows = failures.filter(workflow__isnull=False).values("workflow_id")
        settled = dict(Workflow.objects.filter(pk__in=workflows).values_list("pk", "finished_at"))
        ok_runs = Run.objects.filter(
            workflow_id__in=workflows,
            status=Run.Status.SUCCEEDED,
            created_at__gte=since - CREATED_AFTER_MARGIN,
            finished_at__isnull=False,
        ).exclude(topic="")
        firsts = ok_runs.values_list("workflow_id", "topic").annotate(Min("finished_at")).order_by()
        topic_ok = {(wf, topic): first for wf, topic, first in firsts}
        return cls(reviews, settled, topic_ok)


def delay(
    f: dict[str, Any],
    following: list[dict[str, Any]],
    review: tuple[datetime, datetime | None] | None,
    settled: dict[int, datetime | None],
    topic_ok: dict[tuple[int, str], datetime],
    now: datetime,
) -> Delay:
    """The delay failure `f` caused (the module's definition)."""
    start = f["finished_at"] or f["created_at"]
    end, still_open = _end(f, following, review, settled, now, start)
    first = topic_ok.get((f["workflow_id"], f["topic"])) if f["topic"] else None
    if first is not None:  # its topic succeeded on some run: before this failure, or meanwhile
        if first <= start:
            end, still_open = start, False
        elif first < end:
            end, still_open = first, False
    end = max(end, start)
    total = (end - start).total_seconds()
    human = 0.0
    if review is not None:
        opened, resolved = review
        low, high = max(opened, start), min(resolved or now, end)
        human = max(0.0, (high - low).total_seconds())
    provider = 0.0
    if f["decision"] == Action.WAIT:
        provider = f["decision_delay"] or 0.0
    elif f["decision"] == Action.RETRY and f["retry_after"]:
        asked = f["decision_delay"] if f["decision_delay"] is not None else f["retry_after"]
        provider = min(asked, f["retry_after"])
    provider = max(0.0, min(provider, total - human))
    return Delay(total=total, provider=provider, human=human, open=still_open)


def _end(
    f: dict[str, Any],
    following: list[dict[str, Any]],
    review: tuple[datetime, datetime | None] | None,
    settled: dict[int, datetime | None],
    now: datetime,
    start: datetime,
) -> tuple[datetime, bool]:
    """When the delay of failure `f` ended (or `now`, still open), and whether it is open."""
    if following:
        ends = [n["finished_at"] for n in following if n["finished_at"] is not None]
        if not ends:
            return now, True
        return min(ends), False
    decision = f["decision"]
    if review is not None:
        return (review[1], False) if review[1] is not None else (now, True)
    if decision in (Action.ACCEPT_PARTIAL, Action.ABORT, Action.SWITCH_SOURCE, Action.ESCALATE):
        return f["decided_at"] or start, False
    if decision in (Action.RETRY, Action.WAIT):
        return now, True  # its retry is not written yet
    if f["workflow_id"] is not None:
        finished = settled.get(f["workflow_id"])
        return (finished, False) if finished is not None else (now, True)
    return start, False  # an agent's failure it never asked about: nothing is known to wait


# Cached per window for the pages


def cached_report(
    window: Window, now: datetime | None = None, projects: tuple[int, ...] | None = None
) -> Report:
    """The window's report as last computed, if it is younger than its STALE_SECONDS, else
    computed now and kept: it reads every failure of the window, so unlike the counted tiles it is
    not recomputed at each new run (`Report.now` says when it was). On SQLite (no beat folds, a
    development database) it is computed every time."""
    now = now or timezone.now()
    if minutes.version() is None:
        return report(window.bounds(now)[1], now, projects=projects)
    scope = "all" if projects is None else ",".join(map(str, sorted(projects)))
    key = f"costs:{window.name}:{scope}"
    found = cache.get(key)
    stale = timedelta(seconds=STALE_SECONDS.get(window.name, 60))
    if found is None or not (now - stale <= found.now <= now):
        found = report(window.bounds(now)[1], now, projects=projects)
        cache.set(key, found, int(stale.total_seconds()) * 3)
    return found


def warm(now: datetime | None = None) -> list[str]:
    """Compute the reports of every window (all projects) whose cached one is stale, so that the
    pages seldom wait for one; return the windows computed."""
    from insights.stats import WINDOWS

    now = now or timezone.now()
    computed = []
    for window in WINDOWS.values():
        before = cache.get(f"costs:{window.name}:all")
        after = cached_report(window, now)
        if before is None or after.now != before.now:
            computed.append(window.name)
    return computed
