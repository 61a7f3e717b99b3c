"""Switch efficacy: for every pair from-source → to-source, overall and per failure type, how
often a switch worked, what it added to the wait, and whether the failed run's partial results
were kept; and the order in which the coordinator tries alternatives by it.

A *switch* is a run started on another source after a switch_source decision (`switched_from`
set). It *succeeded* when that first run on the new source succeeded; its *added latency* is the
time from the failed run's end to the new run's end (what the switch cost the workflow); the
failed run's partial results were *kept* when it carried any (the coverage counts them whatever
follows). Switches still running are left out until they finish.

The matrix is one aggregate over the switched runs of the window, served by the partial index
on `switched_from`; a periodic task (`refresh`) caches it, and the coordinator reads only the
cache on a switch, never the aggregate. `ranked()` orders a capability's untried sources by it
only when every candidate has `SWITCH_EFFICACY_MIN_SWITCHES` finished switches from the failing
source (for the failure type, else over all types); otherwise, or with `SWITCH_EFFICACY_ORDERING`
off, the registry's order of preference stands.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db.models import Avg, Count, DurationField, ExpressionWrapper, F, Q
from django.utils import timezone

from orchestrator.models import Run

CACHE_KEY = "failsight:switch-efficacy"
CACHE_SECONDS = 300
ALL_TYPES = ""  # the overall cell of a pair


@dataclass(frozen=True)
class Cell:
    """One pair's switches (for one failure type, or all of them)."""

    from_source: str
    to_source: str
    failure_type: str
    switches: int
    succeeded: int
    partial_kept: int
    added_latency_s: float | None

    @property
    def success_rate(self) -> float:
        return self.succeeded / self.switches if self.switches else 0.0

    def as_row(self) -> dict[str, Any]:
        return {
            "from_source": self.from_source,
            "to_source": self.to_source,
            "failure_type": self.failure_type or "all",
            "switches": self.switches,
            "succeeded": self.succeeded,
            "success_rate": round(self.success_rate, 4),
            "added_latency_s": None
            if self.added_latency_s is None
            else round(self.added_latency_s, 3),
            "partial_kept": self.partial_kept,
        }


Matrix = dict[tuple[str, str, str], Cell]


def compute(days: int | None = None, now: datetime | None = None) -> Matrix:
    """Read the window's finished switches into cells per (from, to, failure type) and overall."""
    since = (now or timezone.now()) - timedelta(days=days or settings.SWITCH_EFFICACY_DAYS)
    added = ExpressionWrapper(
        F("finished_at") - F("switched_from__finished_at"), output_field=DurationField()
    )
    rows = (
        Run.objects.filter(
            switched_from__isnull=False, created_at__gte=since, status__in=Run.FINISHED
        )
        .values_list("switched_from__source", "source", "switched_from__failure_type")
        .annotate(
            n=Count("id"),
            ok=Count("id", filter=Q(status=Run.Status.SUCCEEDED)),
            kept=Count("id", filter=Q(switched_from__partial_count__gt=0)),
            latency=Avg(added),
        )
        .order_by()
    )
    cells: Matrix = {}
    for src, dst, ftype, n, ok, kept, latency in rows:
        seconds = latency.total_seconds() if latency is not None else None
        cells[(src, dst, ftype or "")] = Cell(src, dst, ftype or "", n, ok, kept, seconds)
        _add_overall(cells, src, dst, n, ok, kept, seconds)
    return cells


def _add_overall(
    cells: Matrix, src: str, dst: str, n: int, ok: int, kept: int, seconds: float | None
) -> None:
    old = cells.get((src, dst, ALL_TYPES))
    if old is None:
        cells[(src, dst, ALL_TYPES)] = Cell(src, dst, ALL_TYPES, n, ok, kept, seconds)
        return
    latency = old.added_latency_s
    if seconds is not None:
        # A mean of means weighted by their switches is the mean over all of them.
        latency = (
            seconds
            if latency is None
            else (latency * old.switches + seconds * n) / (old.switches + n)
        )
    cells[(src, dst, ALL_TYPES)] = Cell(
        src, dst, ALL_TYPES, old.switches + n, old.succeeded + ok, old.partial_kept + kept, latency
    )


def refresh() -> int:
    """Compute the matrix and cache it for the coordinator (beat, every CACHE_SECONDS / 2);
    return its cells."""
    found = compute()
    cache.set(CACHE_KEY, found, CACHE_SECONDS)
    return len(found)


def matrix() -> Matrix:
    """The matrix the periodic refresh cached; empty (the registry's order) until it ran. A
    decision never waits for the aggregate: it runs in a workflow's step, under its lock."""
    return cache.get(CACHE_KEY) or {}


def ranked(source: str, failure_type: str | None, candidates: list[str]) -> list[str]:
    """`candidates` (in the registry's order) ordered by how often switching from `source` to
    each succeeded, when every one has enough finished switches; else unchanged."""
    if len(candidates) < 2 or not settings.SWITCH_EFFICACY_ORDERING:
        return candidates
    cells = matrix()
    least = settings.SWITCH_EFFICACY_MIN_SWITCHES
    for ftype in (failure_type or ALL_TYPES, ALL_TYPES):
        found = [cells.get((source, c, ftype)) for c in candidates]
        if all(cell is not None and cell.switches >= least for cell in found):
            rate = {c: cell.success_rate for c, cell in zip(candidates, found, strict=True)}
            return sorted(candidates, key=lambda c: -rate[c])  # stable: ties keep preference
    return candidates
