"""What /metrics' histograms and event counters count: latencies, attempts and decisions read from
the rows that record them (runs, review items, webhook deliveries), folded per hour of the event
into `ObservationHour` by beat every minute. Web and worker processes are many; the database is
one, so every process serves the same cluster-wide figures, and a scrape reads one small table.

A fold recomputes the hours from the rollups' lookback before the previous fold (rows change after
they are written: a run finishes, a decision is taken) and merges older hours into one row per key,
so what a counter or a bucket shows never goes down as the kept hours move on. A run is counted
once it has finished within that lookback of its creation, as in the tiles."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import connection, models, transaction
from django.db.models import (
    Case,
    Count,
    DurationField,
    F,
    FloatField,
    Q,
    QuerySet,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce, Greatest, Trunc
from django.utils import timezone

from insights import costs
from insights.models import ObservationFold, ObservationHour
from insights.stats import floor_hour, rollup_lookback
from orchestrator import counters
from orchestrator.models import CREATED_AFTER_MARGIN, ReviewItem, Run, RunSets, WebhookDelivery

LABELS = ("agent", "source", "failure_type", "action", "event", "project")
FOLD_LOCK = "insights_observations"

# Bucket bounds (seconds, or attempts): machine paths first, then humans.
QUICK = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
RUN = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)
LAG = (0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
HUMAN = (60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0, 259200.0)
ATTEMPTS = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0)


def elapsed(later: str, earlier: str | models.Expression) -> models.Expression:
    start = F(earlier) if isinstance(earlier, str) else earlier
    return models.ExpressionWrapper(F(later) - start, output_field=DurationField())


@dataclass(frozen=True)
class Observed:
    """One family: the rows of `model` matching `where`, in the hour of their `when` field, per
    label (an ObservationHour column: the model's field), with `value` in buckets under `bounds`
    (a histogram); without bounds a counter of the rows, or of their `value` summed."""

    name: str
    help: str
    model: type[models.Model]
    when: str
    labels: dict[str, str] = field(default_factory=dict)
    where: Q = field(default_factory=Q)
    value: models.Expression | None = None
    bounds: tuple[float, ...] = ()
    duration: bool = True
    # An index-backed condition every row with `when` at or after the start also meets.
    narrow: Callable[[datetime], Q] | None = None
    # Money: the rows' costs in COST_CURRENCY, `value` summed into `total` (a counter of amounts).
    money: bool = False

    @property
    def histogram(self) -> bool:
        return bool(self.bounds)

    def _amount(self, seconds: float) -> timedelta | float:
        return timedelta(seconds=seconds) if self.duration else seconds

    def grouped(self, start: datetime | None) -> QuerySet:
        # A row without its event's time would land in the merged hours and count at each fold.
        qs = self.model.objects.filter(self.where, **{f"{self.when}__isnull": False})
        if self.money:
            qs = qs.filter(cost__isnull=False, cost_currency=settings.COST_CURRENCY)
        if start is not None:
            qs = qs.filter(**{f"{self.when}__gte": start})
            if self.narrow is not None:
                qs = qs.filter(self.narrow(start))
        qs = qs.annotate(hour=Trunc(self.when, "hour", tzinfo=UTC))
        sums: dict[str, models.Expression] = {"n": Count("pk")}
        if self.histogram:
            zero = Value(
                self._amount(0), output_field=DurationField() if self.duration else FloatField()
            )
            qs = qs.annotate(observed=self.value).annotate(
                bucket=Case(
                    *(
                        When(observed__lte=self._amount(b), then=Value(i))
                        for i, b in enumerate(self.bounds)
                    ),
                    default=Value(len(self.bounds)),
                )
            )
            # Clocks apart (an agent's, the server's) may put a value below zero: it counts as 0.
            sums["total"] = Sum(Case(When(observed__gt=zero, then=F("observed")), default=zero))
        else:
            qs = qs.annotate(bucket=Value(0))
            if self.money:
                sums["total"] = Sum(self.value)
            elif self.value is not None:
                sums["n"] = Sum(self.value)
        fields = ("hour", *self.labels.values(), "bucket")
        return qs.values(*fields).annotate(**sums).order_by()

    def rows(self, start: datetime | None) -> list[ObservationHour]:
        found = []
        for row in self.grouped(start):
            total = row.get("total") or 0
            found.append(
                ObservationHour(
                    hour=row["hour"],
                    family=self.name,
                    bucket=row["bucket"],
                    count=row["n"],
                    total=total.total_seconds() if isinstance(total, timedelta) else float(total),
                    **{column: row[name] or "" for column, name in self.labels.items()},
                )
            )
        return found


def _claimed_since(start: datetime) -> Q:
    # A claimed item is pending, or resolved since (both indexed); claims are never undone.
    return Q(state__in=ReviewItem.PENDING) | Q(
        state=ReviewItem.State.RESOLVED, resolved_at__gte=start
    )


# When the server knew the run's outcome: its report (created_at) or its finish, the later.
KNOWN = Greatest(F("created_at"), Coalesce(F("finished_at"), F("created_at")))
EVENT = {"event": "event"}
# Runs and review items carry their project: a label of every family read from them.
PROJECT = {"project": "project__slug"}
SPEND_LABELS = {"source": "source", "failure_type": "failure_type"}
# The second part of the wasted spend, added by the fold (`insights.costs.refetch_shares`).
REFETCHED = "failsight_wasted_spend"
FAMILIES = (
    Observed(
        "failsight_ingest_latency_seconds",
        "From a run's end (its finished_at) to its report stored, for runs reported finished.",
        Run,
        "created_at",
        labels=PROJECT,
        where=Q(finished_at__isnull=False, finished_at__lte=F("created_at")),
        value=elapsed("created_at", "finished_at"),
        bounds=LAG,
    ),
    Observed(
        "failsight_decision_latency_seconds",
        "From a failed run's outcome known to its routing decision.",
        Run,
        "created_at",
        labels=PROJECT,
        where=Q(decided_at__isnull=False),
        value=elapsed("decided_at", KNOWN),
        bounds=QUICK,
    ),
    Observed(
        "failsight_decisions",
        "Routing decisions taken, by action and failure type.",
        Run,
        "created_at",
        labels={"action": "decision", "failure_type": "failure_type", **PROJECT},
        where=~Q(decision=""),
    ),
    Observed(
        "failsight_run_duration_seconds",
        "Finished runs' durations, by agent and source.",
        Run,
        "created_at",
        labels={"agent": "agent", "source": "source", **PROJECT},
        where=Q(duration_ms__isnull=False),
        value=F("duration_ms") / Value(1000.0),
        bounds=RUN,
        duration=False,
    ),
    Observed(
        "failsight_review_time_to_claim_seconds",
        "From a review item opened to its claim.",
        ReviewItem,
        "claimed_at",
        labels=PROJECT,
        where=Q(claimed_at__isnull=False),
        value=elapsed("claimed_at", "created_at"),
        bounds=HUMAN,
        narrow=_claimed_since,
    ),
    Observed(
        "failsight_review_time_to_resolve_seconds",
        "From a review item opened to its resolution (by an operator or its fallback).",
        ReviewItem,
        "resolved_at",
        labels=PROJECT,
        where=Q(state=ReviewItem.State.RESOLVED),
        value=elapsed("resolved_at", "created_at"),
        bounds=HUMAN,
    ),
    Observed(
        "failsight_scrubbed_fields",
        "Values the secret filters replaced in what agents reported, by source.",
        Run,
        "created_at",
        labels={"source": "source", **PROJECT},
        where=Q(scrubbed_fields__gt=0),
        value=F("scrubbed_fields"),
    ),
    Observed(
        "failsight_spend",
        "What runs cost in COST_CURRENCY (reported or priced), by source and failure type "
        "(none: not failed).",
        Run,
        "created_at",
        labels={**SPEND_LABELS, **PROJECT},
        value=F("cost"),
        money=True,
    ),
    Observed(
        "failsight_wasted_spend",
        "Wasted spend in COST_CURRENCY, by source and failure type: retries that failed again, "
        "and the share of a run's cost spent fetching again what a failure had gathered.",
        Run,
        "created_at",
        labels={**SPEND_LABELS, **PROJECT},
        where=RunSets.WASTED_RETRIES,
        value=F("cost"),
        money=True,
    ),
    Observed(
        "failsight_webhook_delivery_seconds",
        "From a webhook queued to its receiver's 2xx, by event.",
        WebhookDelivery,
        "created_at",
        labels=EVENT,
        where=Q(state=WebhookDelivery.State.DELIVERED, delivered_at__isnull=False),
        value=elapsed("delivered_at", "created_at"),
        bounds=QUICK,
    ),
    Observed(
        "failsight_webhook_delivery_attempts",
        "Attempts of the webhook deliveries settled (delivered, given up or picked up by an ack).",
        WebhookDelivery,
        "created_at",
        labels=EVENT,
        where=~Q(state=WebhookDelivery.State.PENDING),
        value=Cast("attempts", FloatField()),
        bounds=ATTEMPTS,
        duration=False,
    ),
    Observed(
        "failsight_webhook_failures",
        "Webhook deliveries given up after their last attempt, by event.",
        WebhookDelivery,
        "created_at",
        labels=EVENT,
        where=Q(state=WebhookDelivery.State.FAILED),
    ),
)
BY_NAME = {f.name: f for f in FAMILIES}


def fold(now: datetime | None = None) -> int:
    """Recompute the hours from the lookback before the last fold on, merge the hours older than
    the lookback before `now`; return the rows written (0 also when another fold runs)."""
    now = now or timezone.now()
    with transaction.atomic():
        if counters.enabled():
            with connection.cursor() as cursor:
                if not counters.fold_lock(cursor, FOLD_LOCK):
                    return 0
        last = ObservationFold.objects.select_for_update().first()
        # The first fold reads every row kept; later ones the hours rows may still change in.
        start = floor_hour(min(last.through, now) - rollup_lookback()) if last else None
        recomputed = ObservationHour.objects.all()
        if start is not None:
            recomputed = recomputed.filter(hour__gte=start)
        recomputed.delete()
        rows = [row for family in FAMILIES for row in family.rows(start)]
        rows += _refetched(start, now)
        ObservationHour.objects.bulk_create(rows, batch_size=2000)
        _merge_before(floor_hour(now - rollup_lookback()))
        if last:
            ObservationFold.objects.filter(pk=last.pk).update(through=now)
        else:
            ObservationFold.objects.create(through=now)
    return len(rows)


def _refetched(start: datetime | None, now: datetime) -> list[ObservationHour]:
    """The wasted spend's refetch shares of the runs created from `start` on (the failures they
    followed up to a margin earlier), per hour, source, failure type and project."""
    since = (start or datetime(1970, 1, 1, tzinfo=UTC)) - CREATED_AFTER_MARGIN
    shares = costs.refetch_shares(since, now)
    if not shares:
        return []
    runs = Run.objects.filter(pk__in=sorted(shares))
    if start is not None:
        runs = runs.filter(created_at__gte=start)
    grouped: dict[tuple, list] = {}
    for pk, created, source, ftype, project in runs.values_list(
        "pk", "created_at", "source", "failure_type", "project__slug"
    ):
        key = (floor_hour(created), source, ftype or "", project or "")
        found = grouped.setdefault(key, [0, Decimal(0)])
        found[0] += 1
        found[1] += shares[pk]
    return [
        ObservationHour(
            hour=hour,
            family=REFETCHED,
            source=source,
            failure_type=ftype,
            project=project,
            count=n,
            total=float(total),
        )
        for (hour, source, ftype, project), (n, total) in sorted(grouped.items())
    ]


def _merge_before(cutoff: datetime) -> None:
    """One row per key for every hour before `cutoff` (the rows merged before included)."""
    older = ObservationHour.objects.filter(hour__lt=cutoff)
    if not older.exists():
        return
    merged = ObservationHour.objects.filter(Q(hour__isnull=True) | Q(hour__lt=cutoff))
    keys = ("family", *LABELS, "bucket")
    sums = list(merged.values(*keys).annotate(n=Sum("count"), t=Sum("total")).order_by())
    merged.delete()
    ObservationHour.objects.bulk_create(
        (
            ObservationHour(hour=None, count=row["n"], total=row["t"], **{k: row[k] for k in keys})
            for row in sums
        ),
        batch_size=2000,
    )


@dataclass
class Series:
    """One label set's observations: a count per bucket (the last above every bound) and a sum."""

    counts: list[int]
    total: float = 0.0

    def cumulative(self) -> list[int]:
        """Observations at most each bound, then all of them."""
        return list(itertools.accumulate(self.counts))


def folded() -> list[tuple]:
    """(family, agent, source, failure type, action, event, project, bucket, count, sum) over
    every hour."""
    return list(
        ObservationHour.objects.values_list("family", *LABELS, "bucket")
        .annotate(n=Sum("count"), t=Sum("total"))
        .order_by()
    )


def series(
    rows: Iterable[tuple], bound: Callable[[str, str], str] = lambda kind, name: name
) -> dict[str, dict[tuple[str, ...], Series]]:
    """Per family, the `folded()` rows' series by label values (in the family's label order),
    each agent and source name passed through `bound(kind, name)` (names bound to one add up)."""
    found: dict[str, dict[tuple[str, ...], Series]] = {f.name: {} for f in FAMILIES}
    for family, *labels, bucket, n, total in rows:
        observed = BY_NAME.get(family)
        if observed is None:
            continue  # a family since retired
        values = dict(zip(LABELS, labels, strict=True))
        for kind in ("agent", "source"):
            values[kind] = bound(kind, values[kind])
        key = tuple(values[column] for column in observed.labels)
        if key not in found[family]:
            found[family][key] = Series([0] * (len(observed.bounds) + 1))
        found[family][key].counts[bucket] += n
        found[family][key].total += total or 0.0
    return found
