"""Service-level objectives per agent and per source: the share of finished runs that succeed
(cancelled and skipped runs spend no budget). A *burn rate* is a window's failure share divided by
(1 - objective): 1 spends exactly the budget over the SLO window. Alerts fire when both windows of
a pair burn at its rate, so an ended spike does not page and a long burn is caught early: *fast*
(1 h and 5 min at 14.4: 2 % of a 28-day budget in an hour), *slow* (6 h and 30 min at 6)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.db.models import Count, Q
from django.utils import timezone

from orchestrator.models import Run

FAST = (60, 5, 14.4)  # long window, short window (minutes), burn rate
SLOW = (360, 30, 6.0)
SHORT_WINDOWS = (5, 30, 60, 360)
CACHE_KEY = "failsight:slo"
CACHE_SECONDS = 30
KINDS = ("agent", "source")


def short_of(long_minutes: int) -> int:
    """The short window paired with a long one: a twelfth of it (1 h → 5 min, 6 h → 30 min)."""
    return max(1, long_minutes // 12)


def objective_for(kind: str, name: str) -> float:
    return settings.SLO_OBJECTIVES.get(f"{kind}:{name}", settings.SLO_OBJECTIVE)


@dataclass
class Objective:
    """One agent's or source's objective with its figures."""

    kind: str
    name: str
    objective: float
    total: int = 0
    good: int = 0
    # minutes -> (finished runs, succeeded runs) in that window
    windows: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def success_rate(self) -> float | None:
        return self.good / self.total if self.total else None

    @property
    def allowed(self) -> float:
        return (1 - self.objective) * self.total

    @property
    def budget_remaining(self) -> float:
        """Share of the error budget not spent: 1 untouched, 0 spent, below 0 overspent."""
        bad = self.total - self.good
        if not self.allowed:
            return 1.0 if not bad else -float(bad)
        return 1 - bad / self.allowed

    @property
    def failed(self) -> int:
        return self.total - self.good

    @property
    def budget_spent(self) -> float | None:
        """Failures as a multiple of those the objective allows (None: it allows none)."""
        return self.failed / self.allowed if self.allowed else None

    def burn_rate(self, minutes: int) -> float:
        total, good = self.windows.get(minutes, (0, 0))
        return (total - good) / total / (1 - self.objective) if total else 0.0

    def burning(self, long_minutes: int, rate: float) -> bool:
        """Both windows of the pair at or above `rate`."""
        short = short_of(long_minutes)
        return self.burn_rate(long_minutes) >= rate and self.burn_rate(short) >= rate

    @property
    def alerts(self) -> list[str]:
        return [
            name
            for name, (long, _, rate) in (("fast", FAST), ("slow", SLOW))
            if self.burning(long, rate)
        ]


def _counts(
    since: datetime, until: datetime, projects: tuple[int, ...] | None = None
) -> dict[tuple[str, str], tuple[int, int]]:
    runs = Run.objects.filter(created_at__gte=since, created_at__lt=until)
    if projects is not None:
        runs = runs.filter(project_id__in=projects)
    rows = (
        runs.values_list("agent", "source")
        .annotate(
            total=Count("id", filter=Q(status__in=[Run.Status.SUCCEEDED, *Run.FAILURE])),
            good=Count("id", filter=Q(status=Run.Status.SUCCEEDED)),
        )
        .order_by()
    )
    out: dict[tuple[str, str], tuple[int, int]] = {}
    for agent, source, total, good in rows:
        for key in (("agent", agent), ("source", source)):
            t, g = out.get(key, (0, 0))
            out[key] = (t + total, g + good)
    return out


def objectives(
    now: datetime | None = None,
    windows: Iterable[int] = SHORT_WINDOWS,
    whole: bool = True,
    projects: tuple[int, ...] | None = None,
) -> list[Objective]:
    """Every agent's and source's objective over the SLO window (unless not `whole`), with the
    burn windows' counts (minutes), agents first, each kind by name; of `projects`' runs only,
    if given (the objectives are per agent and source, the same for every project)."""
    now = now or timezone.now()
    since = now - timedelta(days=settings.SLO_WINDOW_DAYS)
    main = _counts(since, now, projects) if whole else {}
    found = {
        key: Objective(key[0], key[1], objective_for(*key), total=t, good=g)
        for key, (t, g) in main.items()
    }
    for minutes in sorted(set(windows)):
        for key, counts in _counts(now - timedelta(minutes=minutes), now, projects).items():
            if key not in found:
                found[key] = Objective(key[0], key[1], objective_for(*key))
            found[key].windows[minutes] = counts
    return sorted(found.values(), key=lambda o: (KINDS.index(o.kind), o.name))


def cached_objectives() -> list[Objective]:
    """`objectives()` computed at most once per CACHE_SECONDS per cache (for /metrics scrapes)."""
    found = cache.get(CACHE_KEY)
    if found is None:
        found = objectives()
        cache.set(CACHE_KEY, found, CACHE_SECONDS)
    return found


def burning(
    long_minutes: int,
    rate: float,
    now: datetime | None = None,
    projects: tuple[int, ...] | None = None,
) -> tuple[float, list[Objective]]:
    """(the worst burn both windows of the pair share, the objectives burning at `rate`), of
    `projects`' runs only if given."""
    short = short_of(long_minutes)
    found = objectives(now, windows=(long_minutes, short), whole=False, projects=projects)
    worst = max((min(o.burn_rate(long_minutes), o.burn_rate(short)) for o in found), default=0.0)
    return worst, [o for o in found if o.burning(long_minutes, rate)]
