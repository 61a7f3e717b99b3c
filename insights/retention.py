"""Retention: runs older than `RUNS_RETENTION_DAYS` go (whole partitions on PostgreSQL), their
counts stay until `ROLLUP_RETENTION_DAYS`, at least as long, so a tile never loses runs it still
shows. A setting of 0 keeps that kind forever."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef
from django.utils import timezone

from insights.models import (
    FailureGroup,
    FailureGroupHour,
    RunRollup,
    SixHourRollup,
    SixHourWastedRetries,
)
from orchestrator import partitions
from orchestrator.models import Run


@dataclass
class Pruned:
    """What one pass removed: the run partitions dropped and the rollup rows deleted."""

    partitions: list[str] = field(default_factory=list)
    rollup_rows: int = 0


def apply(now: datetime | None = None) -> Pruned:
    """Drop what is past its retention at `now`; return what went."""
    now = now or timezone.now()
    pruned = Pruned()
    if settings.RUNS_RETENTION_DAYS:
        cutoff = now - timedelta(days=settings.RUNS_RETENTION_DAYS)
        pruned.partitions = partitions.drop_before(cutoff)
        _unlink_dropped_examples()
    if settings.ROLLUP_RETENTION_DAYS:
        pruned.rollup_rows = _prune_rollups(now - timedelta(days=settings.ROLLUP_RETENTION_DAYS))
    return pruned


def _unlink_dropped_examples() -> int:
    """Clear the example run of groups whose example is gone (a few hundred groups, id probes)."""
    alive = Run.objects.filter(pk=OuterRef("example_run_id"))
    return (
        FailureGroup.objects.filter(example_run_id__isnull=False)
        .exclude(Exists(alive))
        .update(example_run=None)
    )


def _prune_rollups(cutoff: datetime) -> int:
    deleted = RunRollup.objects.filter(hour__lt=cutoff).delete()[0]
    deleted += SixHourRollup.objects.filter(start__lt=cutoff).delete()[0]
    deleted += SixHourWastedRetries.objects.filter(start__lt=cutoff).delete()[0]
    deleted += FailureGroupHour.objects.filter(hour__lt=cutoff).delete()[0]
    return deleted
