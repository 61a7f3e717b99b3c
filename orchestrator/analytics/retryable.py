"""The retry signal audited against what happened: retries spent on failures flagged not
retryable, and retryable failures that never recovered, each row a provider override in one click.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Exists, OuterRef, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from orchestrator.models import ProviderOverride, Run, RunSets
from orchestrator.vocabulary import RETRYABLE

DEFAULT_DAYS = 7
COLUMNS = ("source", "failure_type", "signal", "provider_code", "status_code", "exception_type")


@dataclass(frozen=True)
class AuditRow:
    source: str
    failure_type: str
    signal: str
    match_on: str
    match_value: str
    count: int

    def override_initial(self) -> dict[str, Any]:
        """The provider override this row suggests: the signal marked not retryable."""
        return {
            "provider": self.source,
            "match_on": self.match_on,
            "match_value": self.match_value,
            "failure_type": self.failure_type,
            "retryable": "false",
            "note": "from the retry audit",
        }

    def as_row(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "failure_type": self.failure_type,
            "signal": self.signal,
            "match_on": self.match_on,
            "match_value": self.match_value,
            "count": self.count,
        }


def _rows(qs: Any, counted: str = "id") -> list[AuditRow]:
    grouped = qs.values_list(*COLUMNS).annotate(n=Count(counted, distinct=True)).order_by("-n")
    merged: dict[tuple[str, str, str, str, str], int] = {}
    for source, ftype, signal, code, status, exc_type, n in grouped:
        match_on, value = ProviderOverride.best_signal(code, status, exc_type)
        key = (source, ftype or "", signal, match_on, value)
        merged[key] = merged.get(key, 0) + n
    rows = [AuditRow(*key, count=n) for key, n in merged.items()]
    return sorted(rows, key=lambda r: (-r.count, r.source, r.failure_type))


def window(days: float, now: datetime | None = None) -> datetime:
    return (now or timezone.now()) - timedelta(days=days)


def _of(qs: Any, projects: tuple[int, ...] | None) -> Any:
    return qs if projects is None else qs.filter(project_id__in=projects)


def futile(
    days: float = DEFAULT_DAYS,
    now: datetime | None = None,
    projects: tuple[int, ...] | None = None,
) -> list[AuditRow]:
    """Retries spent on failures that said a retry cannot help (of `projects`' runs, if given)."""
    qs = Run.objects.futile_retries().filter(created_at__gte=window(days, now))
    return _rows(_of(qs, projects))


def never_recovered(
    days: float = DEFAULT_DAYS,
    now: datetime | None = None,
    retries: int | None = None,
    projects: tuple[int, ...] | None = None,
) -> list[AuditRow]:
    """Tasks (counted once) flagged retryable, retried at least `retries` times, never a success
    (of `projects`' runs, if given: a retry is its first attempt's project's)."""
    least = retries or settings.RETRY_AUDIT_MIN_RETRIES
    root = Coalesce("retry_of_id", "id")
    succeeded = Run.objects.filter(
        Q(retry_of_id=OuterRef("task")) | Q(pk=OuterRef("task")), status=Run.Status.SUCCEEDED
    )
    qs = (
        _of(Run.objects, projects)
        .filter(
            RunSets.FAILURES,
            Q(retryable=True) | Q(retryable__isnull=True, failure_type__in=RETRYABLE),
            attempt=least + 1,
            created_at__gte=window(days, now),
        )
        .annotate(task=root)
        .filter(~Exists(succeeded))
    )
    return _rows(qs, counted="task")
