"""Failure groups: failures with one signature folded into groups, as an error tracker does. A
periodic task recomputes the groups' last few hours with one GROUP BY (runs change after they are
created: a retry succeeds, a review resolves); nothing is updated per run on the ingest path."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import (
    Case,
    CharField,
    Count,
    DateTimeField,
    Exists,
    ExpressionWrapper,
    F,
    Func,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Trunc
from django.utils import timezone

from insights.models import FailureGroup, FailureGroupHour, GroupCounts
from insights.stats import floor_hour, rollup_lookback
from orchestrator.fingerprint import normalise_detail, signature
from orchestrator.models import CREATED_AFTER_MARGIN, AuditEntry, ReviewItem, Run, RunSets
from orchestrator.vocabulary import Action, Vocabulary

HOUR = timedelta(hours=1)
SIGN_BATCH = 2000


class Ending(Vocabulary):
    """How a failure's task ended, as the groups count it."""

    # A later attempt of the same task succeeded.
    RECOVERED_RETRY = "recovered_retry"
    # The run a switch started from this failure (or its retry) succeeded.
    RECOVERED_SWITCH = "recovered_switch"
    # A human was asked (a review item), and no retry or switch recovered it.
    ESCALATED = "escalated"
    # Still being handled: undecided, or a retry or switched run has not finished.
    OPEN = "open"
    # Given up: retries exhausted, partial results accepted, aborted, nowhere else to go.
    LOST = "lost"

    @property
    def label(self) -> str:
        return _ENDING_LABELS[self.value]


_ENDING_LABELS = {
    "recovered_retry": "recovered by retry",
    "recovered_switch": "recovered by switch",
    "escalated": "escalated",
    "open": "in progress",
    "lost": "lost",
}
# Which count column each ending and decision adds to.
ENDING_COLUMNS = {
    Ending.RECOVERED_RETRY: "recovered_retry",
    Ending.RECOVERED_SWITCH: "recovered_switch",
    Ending.ESCALATED: "ended_escalated",
    Ending.OPEN: "ended_open",
    Ending.LOST: "ended_lost",
}
DECISION_COLUMNS = {
    Action.RETRY: "decided_retry",
    Action.WAIT: "decided_retry",  # a retry whose delay the source set
    Action.SWITCH_SOURCE: "decided_switch",
    Action.ACCEPT_PARTIAL: "decided_partial",
    Action.ESCALATE: "decided_escalate",
    Action.ABORT: "decided_abort",
}


# How a failure ended, in SQL (one annotation, index probes only)


def _after(outer: OuterRef, since: datetime | None) -> Q:
    """What follows a run is created after it: saying so lets PostgreSQL skip, at run time, every
    partition older than the run instead of probing the indexes of all of them. A constant
    `since` lets it skip them when it plans: for a page's few runs, planning the probes over
    every partition took longer than running them."""
    after = Q(created_at__gte=ExpressionWrapper(outer - CREATED_AFTER_MARGIN, DateTimeField()))
    return after if since is None else after & Q(created_at__gte=since)


def _later_attempts(since: datetime | None) -> QuerySet:
    """Attempts of the outer run's task after it (the unique (retry_of, attempt) index)."""
    root = Coalesce(OuterRef("retry_of_id"), OuterRef("pk"))
    return Run.objects.filter(
        _after(OuterRef("created_at"), since), retry_of_id=root, attempt__gt=OuterRef("attempt")
    )


def _switched_task(statuses: tuple[str, ...], since: datetime | None) -> Q:
    """The run a switch started from the outer run, or a retry of it, is in `statuses`. Retries
    are looked for from each started run (the (retry_of, attempt) index), never from the runs in
    `statuses` since the failure: queued and running runs are thousands an hour, and PostgreSQL
    read them all for each failure."""
    started = Run.objects.filter(
        _after(OuterRef("created_at"), since), switched_from_id=OuterRef("pk")
    )
    retried = Run.objects.filter(
        _after(OuterRef("created_at"), since), retry_of_id=OuterRef("pk"), status__in=statuses
    )
    return Q(Exists(started.filter(status__in=statuses))) | Q(
        Exists(started.filter(Exists(retried)))
    )


def ending(since: datetime | None = None) -> Case:
    """The `Ending` of each failed run, as a CASE over a few indexed EXISTS probes; `since`
    bounds what the probes read when every run is known to be newer (by two margins)."""
    ok, pending = (Run.Status.SUCCEEDED,), tuple(Run.PENDING)
    return Case(
        When(
            Exists(_later_attempts(since).filter(status__in=ok)),
            then=Value(Ending.RECOVERED_RETRY),
        ),
        When(_switched_task(ok, since), then=Value(Ending.RECOVERED_SWITCH)),
        When(status=Run.Status.ESCALATED, then=Value(Ending.ESCALATED)),
        When(decision="", then=Value(Ending.OPEN)),
        When(Exists(_later_attempts(since).filter(status__in=pending)), then=Value(Ending.OPEN)),
        When(_switched_task(pending, since), then=Value(Ending.OPEN)),
        default=Value(Ending.LOST),
        output_field=CharField(),
    )


# The fold


def fold(start: datetime | None = None, now: datetime | None = None) -> int:
    """Recompute every group's hours, the current one included, from `start` (default: the
    rollups' lookback) to now; return the hourly rows written."""
    now = now or timezone.now()
    start = floor_hour(start or now - rollup_lookback())
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # Two overlapping folds would both delete, then collide on the unique key.
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(hashtext('dashboard_failure_groups'))")
        sign_unsigned(start, now)
        failures = Run.objects.filter(RunSets.FAILURES, created_at__gte=start, created_at__lt=now)
        failures = failures.exclude(signature="")
        hours = _hour_rows(failures)
        groups = _ensure_groups({sig for sig, _ in hours})
        touched = set(
            FailureGroupHour.objects.filter(hour__gte=start).values_list("group_id", flat=True)
        )
        FailureGroupHour.objects.filter(hour__gte=start).delete()
        FailureGroupHour.objects.bulk_create(
            (
                FailureGroupHour(group_id=groups[sig], hour=hour, **values)
                for (sig, hour), values in sorted(hours.items())
            ),
            batch_size=2000,
        )
        touched |= {groups[sig] for sig, _ in hours}
        _refresh_totals(touched, _seen(failures, groups), now)
    return len(hours)


def sign_unsigned(start: datetime, now: datetime) -> int:
    """Sign the window's failures stored without a signature (rows from before signatures, or
    written around the model); return how many were signed."""
    signed = 0
    unsigned = Run.objects.filter(
        RunSets.FAILURES, created_at__gte=start, created_at__lt=now, signature=""
    ).only("pk", "source", "failure_type", "detail")
    while batch := list(unsigned[:SIGN_BATCH]):
        for run in batch:
            run.signature = signature(run.source, run.failure_type, run.detail)
        Run.objects.bulk_update(batch, ["signature"], batch_size=500)
        signed += len(batch)
    return signed


def _hour_rows(failures: QuerySet) -> dict[tuple[str, datetime], dict[str, Any]]:
    """{(signature, hour): counts} from one GROUP BY over the window's failures."""
    rows = (
        failures.annotate(hour=Trunc("created_at", "hour", tzinfo=UTC), ending=ending())
        .values("signature", "hour", "ending", "decision")
        .annotate(
            n=Count("id"),
            wasted=Count("id", filter=RunSets.RETRIES),
            partial=Count("id", filter=Q(partial_count__gt=0)),
            futile=Count("id", filter=RunSets.FUTILE_RETRIES),
            first_at=Min("created_at"),
            last_at=Max("created_at"),
        )
        .order_by()
    )
    out: dict[tuple[str, datetime], dict[str, Any]] = {}
    for row in rows:
        key = (row["signature"], row["hour"])
        acc = out.setdefault(key, dict.fromkeys(GroupCounts.COUNTS, 0))
        acc["first_at"] = min(acc.get("first_at") or row["first_at"], row["first_at"])
        acc["last_at"] = max(acc.get("last_at") or row["last_at"], row["last_at"])
        acc["count"] += row["n"]
        acc["wasted"] += row["wasted"]
        acc["partial"] += row["partial"]
        acc["futile"] += row["futile"]
        acc[ENDING_COLUMNS[Ending(row["ending"])]] += row["n"]
        if row["decision"] in DECISION_COLUMNS:
            acc[DECISION_COLUMNS[Action(row["decision"])]] += row["n"]
    return out


def _ensure_groups(signatures: set[str]) -> dict[str, int]:
    """{signature: group id}, creating the groups seen for the first time from their first run."""
    known = dict(
        FailureGroup.objects.filter(signature__in=signatures).values_list("signature", "pk")
    )
    for sig in sorted(signatures - set(known)):
        run = Run.objects.filter(signature=sig).order_by("created_at", "id").first()
        if run is None:  # pragma: no cover - the signature came from a run of this transaction
            continue
        group = FailureGroup.objects.create(
            signature=sig,
            source=run.source,
            failure_type=run.failure_type or "",
            pattern=normalise_detail(run.detail),
            example=run.detail[:2000],
            example_run=run,
            first_seen=run.created_at,
            last_seen=run.created_at,
        )
        known[sig] = group.pk
    return known


def _seen(failures: QuerySet, groups: dict[str, int]) -> dict[int, tuple[set, set]]:
    """{group id: (agents, workflow ids)} that failed this way in the window."""
    seen: dict[int, tuple[set, set]] = defaultdict(lambda: (set(), set()))
    for sig, agent in failures.values_list("signature", "agent").distinct().order_by():
        seen[groups[sig]][0].add(agent)
    pairs = failures.exclude(workflow__isnull=True).values_list("signature", "workflow_id")
    for sig, workflow in pairs.distinct().order_by():
        seen[groups[sig]][1].add(workflow)
    return seen


def _refresh_totals(touched: set[int], seen: dict[int, tuple[set, set]], now: datetime) -> None:
    """Sum the touched groups' hours into their totals; reopen resolved groups that came back."""
    sums = {
        row["group_id"]: row
        for row in FailureGroupHour.objects.filter(group_id__in=touched)
        .values("group_id")
        .annotate(*(Sum(c) for c in GroupCounts.COUNTS), Min("first_at"), Max("last_at"))
        .order_by()
    }
    groups = list(FailureGroup.objects.filter(pk__in=touched))
    for group in groups:
        row = sums.get(group.pk)
        for column in GroupCounts.COUNTS:
            setattr(group, column, (row or {}).get(f"{column}__sum") or 0)
        if row:
            group.first_seen = min(group.first_seen, row["first_at__min"])
            group.last_seen = max(group.last_seen, row["last_at__max"])
        agents, workflows = seen.get(group.pk, (set(), set()))
        group.agents, group.agents_capped = _merge(group.agents, agents, group.agents_capped)
        group.workflows, group.workflows_capped = _merge(
            group.workflows, workflows, group.workflows_capped
        )
    columns = [*GroupCounts.COUNTS, "first_seen", "last_seen", "agents", "agents_capped"]
    columns += ["workflows", "workflows_capped"]
    FailureGroup.objects.bulk_update(groups, columns, batch_size=500)
    # A resolved group seen again after its resolution is a regression: reopened, flagged.
    for group in groups:
        if group.state == FailureGroup.State.RESOLVED and group.last_seen > group.resolved_at:
            FailureGroup.objects.filter(
                pk=group.pk, state=FailureGroup.State.RESOLVED, resolved_at=group.resolved_at
            ).update(state=FailureGroup.State.OPEN, regressed_at=now, state_changed_at=now)


def _merge(listed: list, new: set, capped: bool) -> tuple[list, bool]:
    values = sorted(set(listed) | new, key=str)
    limit = FailureGroup.MAX_LISTED
    return values[:limit], capped or len(values) > limit


# An operator's decisions on a group


def set_state(group: FailureGroup, state: str, user: Any, now: datetime | None = None) -> bool:
    """Open, mute or resolve a group (a conditional update, audited); False if it already was."""
    now = now or timezone.now()
    if state not in FailureGroup.State.values:
        raise ValueError(f"unknown group state {state!r}")
    fields: dict[str, Any] = {"state": state, "state_changed_at": now, "state_changed_by": user}
    if state == FailureGroup.State.RESOLVED:
        fields |= {"resolved_at": now, "regressed_at": None}
    elif state == FailureGroup.State.OPEN:
        fields["regressed_at"] = None  # reopened by hand: a decision, not a regression
    with transaction.atomic():
        before = group.state
        changed = FailureGroup.objects.filter(pk=group.pk).exclude(state=state).update(**fields)
        if not changed:
            return False
        group.refresh_from_db()
        AuditEntry.record(
            actor=user,
            action=f"failuregroup.{state}",
            obj=group,
            before={"state": before},
            after={"state": state},
        )
    return True


# Reading groups


@dataclass(frozen=True)
class GroupWindow:
    """A window of the groups page: `buckets` sparkline buckets of `per_bucket` hours."""

    name: str
    label: str
    hours: int
    per_bucket: int

    def start(self, now: datetime) -> datetime:
        """The first hour of the window (the current hour is its last)."""
        return floor_hour(now) - (self.hours - 1) * HOUR

    @property
    def buckets(self) -> int:
        return self.hours // self.per_bucket


GROUP_WINDOWS = {
    "24h": GroupWindow("24h", "last 24 hours", 24, 1),
    "7d": GroupWindow("7d", "last 7 days", 168, 6),
    "30d": GroupWindow("30d", "last 30 days", 720, 24),
}


def window_counts(window: GroupWindow, now: datetime, ids: Any = None) -> dict[int, dict]:
    """{group id: counts summed over the window's hours}."""
    hours = FailureGroupHour.objects.filter(hour__gte=window.start(now))
    if ids is not None:
        hours = hours.filter(group_id__in=ids)
    rows = hours.values("group_id").annotate(*(Sum(c) for c in GroupCounts.COUNTS)).order_by()
    return {r["group_id"]: {c: r[f"{c}__sum"] or 0 for c in GroupCounts.COUNTS} for r in rows}


class BucketIndex(Func):
    """The index of the `seconds`-long bucket, counted from `start`, that `hour` falls in: summed
    in SQL, a page reads a row per group and bucket instead of one per group and hour."""

    output_field = IntegerField()

    def __init__(self, hour: str, start: datetime, seconds: int) -> None:
        super().__init__(F(hour), Value(start, output_field=DateTimeField()))
        self.seconds = int(seconds)

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        template = f"FLOOR(EXTRACT(EPOCH FROM (%(expressions)s)) / {self.seconds})::integer"
        return self.as_sql(compiler, connection, template=template, arg_joiner=" - ", **extra)

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # julianday is a float: a second's margin keeps an hour on a bucket's edge inside it.
        template = f"CAST(((julianday(%(expressions)s)) * 86400 + 1) / {self.seconds} AS INTEGER)"
        joiner = ") - julianday("
        return self.as_sql(compiler, connection, template=template, arg_joiner=joiner, **extra)


def sparklines(window: GroupWindow, now: datetime, ids: list[int]) -> dict[int, list[int]]:
    """{group id: failures per bucket of the window}, oldest bucket first."""
    start = window.start(now)
    lines = {pk: [0] * window.buckets for pk in ids}
    rows = (
        FailureGroupHour.objects.filter(group_id__in=ids, hour__gte=start)
        .annotate(bucket=BucketIndex("hour", start, window.per_bucket * 3600))
        .values_list("group_id", "bucket")
        .annotate(n=Sum("count"))
        .order_by()
    )
    for pk, index, n in rows:
        lines[pk][min(index, window.buckets - 1)] += n
    return lines


def daily(group: FailureGroup, now: datetime, days: int = 30) -> list[int]:
    """Failures of one group per day over the last `days` days (its page's sparkline)."""
    window = GroupWindow("days", "", days * 24, 24)
    return sparklines(window, now, [group.pk])[group.pk]


def add_endings(runs: list[Run]) -> list[Run]:
    """Set `ending` on a page's few failed runs, with probes bounded by the oldest run's time."""
    if not runs:
        return runs
    oldest = min(run.created_at for run in runs)
    ids = list(dict.fromkeys(run.pk for run in runs))
    found = dict(_endings(ids, oldest, oldest - 2 * CREATED_AFTER_MARGIN))
    for run in runs:
        run.ending = found.get(run.pk, Ending.OPEN)
    return runs


def _endings_queryset(ids: list[int], oldest: datetime, since: datetime) -> QuerySet:
    return (
        Run.objects.filter(pk__in=ids, created_at__gte=oldest)
        .annotate(ending=ending(since=since))
        .values_list("pk", "ending")
    )


# The endings' statement compiled once per process and number of runs: compiling its six
# probes took Django longer than PostgreSQL took to run them (about 15 ms of CPU at load 10
# against a page's whole SQL of 15). It is compiled with stand-in values, whose places among its
# parameters say where each real value goes.
_STAND_IN_OLDEST = datetime(1971, 1, 1, tzinfo=UTC)
_STAND_IN_SINCE = datetime(1972, 2, 2, tzinfo=UTC)
_ENDINGS_SQL: dict[tuple[str, int], tuple[str, list[Any]] | None] = {}


def _endings(ids: list[int], oldest: datetime, since: datetime) -> list[tuple[int, str]]:
    key = (connection.vendor, len(ids))
    if key not in _ENDINGS_SQL:
        _ENDINGS_SQL[key] = _compiled_endings(len(ids))
    compiled = _ENDINGS_SQL[key]
    if compiled is None:  # the stand-ins were not found as expected: compile every time
        return list(_endings_queryset(ids, oldest, since))
    sql, stand_ins = compiled
    adapt = connection.ops.adapt_datetimefield_value
    real = {adapt(_STAND_IN_OLDEST): adapt(oldest), adapt(_STAND_IN_SINCE): adapt(since)}
    params = []
    for value in stand_ins:
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            params.append(ids[-value - 1])
        elif isinstance(value, datetime | str) and value in real:
            params.append(real[value])
        else:
            params.append(value)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(pk, end) for pk, end in cursor.fetchall()]


def _compiled_endings(count: int) -> tuple[str, list[Any]] | None:
    """The statement for `count` runs and its parameters with stand-ins: -1 … -count for the
    ids, and the two stand-in times; None if they do not each appear where expected."""
    queryset = _endings_queryset(list(range(-1, -count - 1, -1)), _STAND_IN_OLDEST, _STAND_IN_SINCE)
    sql, params = queryset.query.get_compiler(using=queryset.db).as_sql()
    params = list(params)
    adapt = connection.ops.adapt_datetimefield_value
    negatives = [p for p in params if isinstance(p, int) and not isinstance(p, bool) and p < 0]
    if (
        sorted(negatives) != list(range(-count, 0))
        or adapt(_STAND_IN_OLDEST) not in params
        or adapt(_STAND_IN_SINCE) not in params
    ):
        return None
    return sql, params


def open_reviews(group: FailureGroup) -> int:
    return ReviewItem.objects.with_signature(group.signature).count()
