"""Switch efficacy: for every pair from-source → to-source, overall and per failure type, how
often a switch worked and what it added to the wait; and the order in which the coordinator tries
alternatives by it. A periodic task caches the matrix: a switch reads only the cache."""

from __future__ import annotations

import re
from collections.abc import Iterable
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
# An alternative that is a source's bare name (a sentence is a suggestion: `Registry.names_in`).
SOURCE_NAME = re.compile(r"[\w-]+(?:[.:/][\w-]+)*")


@dataclass(frozen=True)
class Cell:
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


def compute(
    days: int | None = None, now: datetime | None = None, projects: tuple[int, ...] | None = None
) -> Matrix:
    """Read the window's finished switches into cells per (from, to, failure type) and overall
    (of `projects`' runs only, if given)."""
    since = (now or timezone.now()) - timedelta(days=days or settings.SWITCH_EFFICACY_DAYS)
    added = ExpressionWrapper(
        F("finished_at") - F("switched_from__finished_at"), output_field=DurationField()
    )
    switches = Run.objects.filter(
        switched_from__isnull=False, created_at__gte=since, status__in=Run.FINISHED
    )
    if projects is not None:
        switches = switches.filter(project_id__in=projects)
    rows = (
        switches.values_list("switched_from__source", "source", "switched_from__failure_type")
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
        latency = (
            seconds
            if latency is None
            else (latency * old.switches + seconds * n) / (old.switches + n)
        )
    cells[(src, dst, ALL_TYPES)] = Cell(
        src, dst, ALL_TYPES, old.switches + n, old.succeeded + ok, old.partial_kept + kept, latency
    )


def refresh() -> int:
    found = compute()
    cache.set(CACHE_KEY, found, CACHE_SECONDS)
    return len(found)


def matrix() -> Matrix:
    """Return the cached matrix: a decision runs under a workflow's lock and never waits for the
    aggregate."""
    return cache.get(CACHE_KEY) or {}


def ranked(source: str, failure_type: str | None, candidates: list[str]) -> list[str]:
    """Return `candidates` ordered by how often switching from `source` to each succeeded, when
    every one has enough finished switches; else unchanged."""
    if len(candidates) < 2 or not settings.SWITCH_EFFICACY_ORDERING:
        return candidates
    cells = matrix()
    least = settings.SWITCH_EFFICACY_MIN_SWITCHES
    for ftype in (failure_type or ALL_TYPES, ALL_TYPES):
        found = [cells.get((source, c, ftype)) for c in candidates]
        if all(cell is not None and cell.switches >= least for cell in found):
            rate = {c: cell.success_rate for c, cell in zip(candidates, found, strict=True)}
            return sorted(candidates, key=lambda c: -rate[c])
    return candidates


def ranked_alternatives(
    source: str, failure_type: str | None, named: Iterable[str], tried: Iterable[str] = ()
) -> list[str]:
    """The sources an agent named as its own alternatives (registered here or not), untried, in
    the order the built-in coordinator would try them (`ranked`)."""
    skip = {source, *tried}
    own = (n for n in named if SOURCE_NAME.fullmatch(n) and n not in skip)
    return ranked(source, failure_type, list(dict.fromkeys(own)))
