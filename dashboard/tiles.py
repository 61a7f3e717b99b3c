"""The overview's tiles: numbers from `stats`, each linked to the runs behind it (the same named
run set or status and failure type the number counted, so the drill-down shows exactly those runs)
and to their failure groups on the same window."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.core.cache import cache
from django.db.models import Count, Min, QuerySet
from django.urls import reverse
from django.utils import timezone

from dashboard.templatetags.dashboard import duration
from insights import baseline, costs, minutes
from insights.stats import FAILURE_STATUSES, Window, WindowStats, window_stats
from orchestrator.coordination.budget import source_states
from orchestrator.models import FailureType, ReviewItem, Run, Workflow

# How long a rendered fragment may stay cached: a new version replaces it long before.
FRAGMENT_SECONDS = 600


@dataclass
class Tile:
    key: str
    title: str
    value: str
    href: str
    sub: str = ""
    current: float | None = None
    previous: float | None = None
    lower_is_better: bool = True
    spark: list[int] | None = None
    failure_type: str = ""
    tone: str = ""  # "ok" | "warn" | "bad" | ""
    rows: list[tuple[str, Any]] = field(default_factory=list)
    groups: str = ""  # the failure groups behind the number ("" when there are none to see)
    groups_label: str = ""


def _url(name: str, query: dict[str, Any]) -> str:
    query = {k: ",".join(v) if isinstance(v, list | tuple) else v for k, v in query.items()}
    return reverse(name) + ("?" + urlencode(query) if query else "")


def runs_url(window: Window | None = None, **params: Any) -> str:
    return _url("dashboard:runs", ({"range": window.name} if window else {}) | params)


def groups_url(window: Window, **params: Any) -> str:
    """The failure groups page on the tile's window (groups count by the hour: the last hour's
    tiles open the last 24 hours)."""
    return _url("dashboard:failure_groups", {"range": _group_range(window)} | params)


def _group_range(window: Window) -> str:
    return window.name if window.name in ("24h", "7d") else "24h"


def _rate(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}".replace(".0%", "%")


def traffic_tiles(s: WindowStats) -> list[Tile]:
    cur, prev, w = s.current, s.previous, s.window
    rate, prev_rate = (
        _rate(cur.by_status[Run.Status.SUCCEEDED], cur.finished),
        _rate(prev.by_status[Run.Status.SUCCEEDED], prev.finished),
    )
    failures = list(FAILURE_STATUSES)
    succeeded = cur.by_status[Run.Status.SUCCEEDED]
    return [
        Tile(
            "runs",
            "Runs",
            f"{cur.runs:,}",
            runs_url(w, expect=cur.runs),
            spark=s.series[""],
            sub=f"{cur.metric['empty_runs']:,} valid empty",
            current=cur.runs,
            previous=prev.runs,
            lower_is_better=False,
            groups=groups_url(w),
        ),
        Tile(
            "success",
            "Success rate",
            _pct(rate),
            runs_url(w, status=Run.Status.SUCCEEDED),
            sub=f"{succeeded:,} of {cur.finished:,} finished runs succeeded",
            current=round((rate or 0) * 100, 1),
            previous=round((prev_rate or 0) * 100, 1),
            lower_is_better=False,
            tone=""
            if rate is None
            else ("ok" if rate >= 0.95 else "warn" if rate >= 0.8 else "bad"),
            groups=groups_url(w),
            groups_label="what failed",
        ),
        Tile(
            "retries",
            "Retries spent / avoided",
            f"{cur.metric['retries']:,} / {cur.metric['avoided_retries']:,}",
            runs_url(w, flag="retry"),
            current=cur.metric["retries"],
            previous=prev.metric["retries"],
            sub="avoided: failures routed elsewhere instead of a blind retry",
            groups=groups_url(w, has="retry"),
        ),
        Tile(
            "partial",
            "Partial results preserved",
            f"{cur.metric['partial_items']:,}",
            runs_url(w, status=failures, flag="partial"),
            sub=f"in {cur.metric['partial_runs']:,} failed runs",
            current=cur.metric["partial_items"],
            previous=prev.metric["partial_items"],
            lower_is_better=False,
            groups=groups_url(w, has="partial"),
        ),
    ]


def failure_tiles(s: WindowStats) -> list[Tile]:
    return [
        Tile(
            f"ft-{ftype}",
            label.capitalize(),
            f"{s.current.by_type[ftype]:,}",
            runs_url(s.window, failure_type=ftype),
            failure_type=ftype,
            current=s.current.by_type[ftype],
            previous=s.previous.by_type[ftype],
            spark=s.series[ftype],
            groups=groups_url(s.window, failure_type=ftype),
        )
        for ftype, label in FailureType.choices
    ]


def recovery_tiles(s: WindowStats) -> list[Tile]:
    cur, w = s.current, s.window
    wasted = sorted(cur.wasted.items(), key=lambda kv: -kv[1])[:4]
    futile = cur.metric["futile_retries"]
    early = cur.metric["early_retries"]
    unclassified_type = FailureType.UNCLASSIFIED
    unclassified = _rate(cur.by_type[unclassified_type], cur.failures)
    switched = _rate(cur.switched_ok, cur.switched_done)
    return [
        Tile(
            "wasted",
            "Wasted retries",
            f"{cur.wasted_total:,}",
            runs_url(w, flag="wasted"),
            sub=f"retries that still failed; {futile:,} spent on failures that said a retry "
            "cannot help",
            rows=[(f"{ft} · {src}", n) for (ft, src), n in wasted],
            tone="bad" if futile else "warn" if cur.wasted_total else "ok",
            groups=groups_url(w, has="wasted"),
        ),
        Tile(
            "early",
            "Retry-after compliance",
            f"{early:,} early",
            runs_url(w, flag="early"),
            sub="calls inside their source's Retry-After hold, whatever their query, or retries "
            "before their due time (should be 0)",
            tone="bad" if early else "ok",
            # The failures that come with a Retry-After to honour.
            groups=groups_url(w, failure_type=FailureType.RATE_LIMITED),
            groups_label="rate-limit groups",
        ),
        Tile(
            "futile",
            "Retry-signal compliance",
            f"{futile:,} futile",
            runs_url(w, flag="futile"),
            sub="failures retried although they said a retry cannot help (should be 0)",
            tone="bad" if futile else "ok",
            groups=groups_url(w, has="futile"),
        ),
        Tile(
            "unclassified",
            "Unclassified share",
            _pct(unclassified),
            runs_url(w, failure_type=unclassified_type),
            sub=f"{cur.by_type[unclassified_type]:,} of {cur.failures:,} failures",
            tone="warn" if (unclassified or 0) > 0.1 else "",
            groups=groups_url(w, failure_type=unclassified_type),
        ),
        Tile(
            "switched",
            "Switched sources succeed",
            _pct(switched),
            runs_url(w, flag="switched"),
            sub=f"{cur.switched_ok:,} of {cur.switched_done:,} finished switches",
            groups=groups_url(w, has="switch"),
        ),
    ]


def _of(qs: QuerySet, projects: tuple[int, ...] | None) -> QuerySet:
    return qs if projects is None else qs.filter(project_id__in=projects)


def attention_tiles(
    window: Window, start: datetime, projects: tuple[int, ...] | None = None
) -> list[Tile]:
    """The tiles read live (of `projects` only, if given; sources are every project's)."""
    queue = _of(ReviewItem.objects.open(), projects).aggregate(
        open_count=Count("id"), oldest=Min("created_at")
    )
    open_count, oldest = queue["open_count"], queue["oldest"]
    degraded = _of(Workflow.objects, projects).filter(
        status=Workflow.Status.DEGRADED, created_at__gte=start
    )
    troubled = [s for s in source_states() if s.in_trouble]
    names = [s.source for s in troubled]
    age = (timezone.now() - oldest).total_seconds() if oldest else None
    return [
        in_flight_tile(projects),
        Tile(
            "review",
            "Open review items",
            f"{open_count:,}",
            reverse("dashboard:review_queue"),
            sub=f"oldest waiting {duration(age)}" if open_count else "queue empty",
            tone="warn" if open_count else "ok",
            groups=reverse("dashboard:review_queue") + "?view=groups" if open_count else "",
            groups_label="grouped",
        ),
        pickup_tile(projects),
        refreshed_tile(window, start, projects),
        Tile(
            "degraded",
            "Workflows degraded",
            f"{degraded.count():,}",
            reverse("dashboard:workflows")
            + f"?status={Workflow.Status.DEGRADED}&range={window.name}",
            sub="finished with gaps in coverage",
            groups=groups_url(window, has="lost"),
            groups_label="lost failures",
        ),
        Tile(
            "sources",
            "Sources in trouble",
            f"{len(troubled)}",
            # No source in trouble: nothing to drill into (not every failure of the window).
            runs_url(window, source=names, status=list(FAILURE_STATUSES)) if names else "",
            sub="open breaker or empty retry budget" if names else "all breakers closed",
            rows=[(s.source, s.label) for s in troubled[:4]],
            tone="bad" if troubled else "ok",
            groups=groups_url(window, source=names) if names else "",
        ),
    ]


def refreshed_tile(
    window: Window, start: datetime, projects: tuple[int, ...] | None = None
) -> Tile:
    """Auth failures answered "refresh the credentials, then retry once" in the window (by the
    built-in coordinator or an agent's own), instead of waiting for a human."""
    count = _of(Run.objects.refreshed().filter(created_at__gte=start), projects).count()
    return Tile(
        "refreshed",
        "Credentials refreshed",
        f"{count:,}",
        runs_url(window, flag="refreshed") if count else "",
        sub="auth failures refreshed and retried once instead of waiting for a human"
        if count
        else "no auth failure needed a refresh",
        # The auth failures' groups: those refreshed and those that still wait for a person.
        groups=groups_url(window, failure_type=FailureType.AUTH_FAILURE),
        groups_label="auth groups",
    )


def pickup_tile(projects: tuple[int, ...] | None = None) -> Tile:
    """Agents' resolutions nobody picked up within RESOLUTION_PICKUP_TIMEOUT (the agent may be
    gone), linked to the resolved items the same condition lists."""
    count = _of(ReviewItem.objects.pickup_overdue(timezone.now()), projects).count()
    timeout = duration(ReviewItem.pickup_timeout().total_seconds())
    return Tile(
        "pickup",
        "Resolutions not picked up",
        f"{count:,}",
        _url("dashboard:review_queue", {"state": "resolved", "pickup": "overdue"}),
        sub=f"no agent acknowledged them within {timeout}: agent gone?"
        if count
        else "agents pick their resolutions up",
        tone="warn" if count else "ok",
    )


def in_flight_tile(projects: tuple[int, ...] | None = None) -> Tile:
    """Runs started and not finished (the coordinator's and agents' own), with the longest age."""
    running = _of(Run.objects.in_flight(), projects).aggregate(
        n=Count("id"), oldest=Min("created_at")
    )
    count, oldest = running["n"], running["oldest"]
    age = (timezone.now() - oldest).total_seconds() if oldest else None
    return Tile(
        "in_flight",
        "Runs in flight",
        f"{count:,}",
        reverse("dashboard:in_flight"),
        sub=f"longest running {duration(age)}" if count else "nothing running",
    )


def counted_tiles(window: Window, projects: tuple[int, ...] | None = None) -> dict[str, Any]:
    """The tiles counted from the rollups (the same for every operator who sees every project),
    or from the runs of `projects`."""
    stats = window_stats(window, projects=projects)
    return {
        "window": window,
        "stats": stats,
        "traffic": traffic_tiles(stats),
        "failures": failure_tiles(stats),
        "recovery": recovery_tiles(stats),
    }


def overview_tiles(window: Window, projects: tuple[int, ...] | None = None) -> dict[str, Any]:
    counted = counted_tiles(window, projects)
    return counted | {"attention": attention_tiles(window, counted["stats"].start, projects)}


def cached_fragments(
    window: Window,
    render: Callable[[dict[str, Any]], dict[str, str]],
    projects: tuple[int, ...] | None = None,
) -> Any:
    """The counted tiles rendered by `render`, cached while neither the rollups' version nor the
    window's current step has changed (on SQLite, whose counts are live, rendered every time;
    for some projects only, counted from their runs every time)."""
    key_version = minutes.version()
    if key_version is None or projects is not None:
        return render(counted_tiles(window, projects))
    anchor = window.bounds(timezone.now())[2]
    key = f"overview-tiles:{window.name}:{anchor:%Y%m%d%H%M}:{key_version[0]}:{key_version[1]}"
    fragments = cache.get(key)
    if fragments is None:
        fragments = render(counted_tiles(window))
        cache.set(key, fragments, FRAGMENT_SECONDS)
    return fragments


def amount(value: Any, currency: str) -> str:
    """Money to the cent, with its currency (the CSV keeps every digit)."""
    return f"{value:,.2f} {currency}"


def cost_tiles(window: Window, report: costs.Report) -> list[Tile]:
    """Spend, wasted spend, spend avoided and time lost over the window (`insights.costs`), each
    linked to the runs its number adds up."""
    t, cur = report.total, report.currency
    failures = list(FAILURE_STATUSES)
    wasted_by_source = sorted(
        ((line.key, line.wasted) for line in report.tables["source"].values() if line.wasted),
        key=lambda kv: (-kv[1], kv[0]),
    )[:4]
    return [
        Tile(
            "spend",
            "Spend",
            amount(t.spend, cur),
            runs_url(window, flag="priced", expect=t.priced_runs),
            sub=f"{t.priced_runs:,} runs with a cost"
            + (
                f"; {report.other_currency_runs:,} in other currencies not added"
                if report.other_currency_runs
                else ""
            ),
        ),
        Tile(
            "wasted_spend",
            "Wasted spend",
            amount(t.wasted, cur),
            runs_url(window, flag="wasted_spend", expect=t.wasted_runs),
            sub=f"{t.wasted_runs:,} runs: retries that failed again, calls that fetched again "
            "what a failure had gathered",
            rows=[(source, amount(v, cur)) for source, v in wasted_by_source],
            tone="warn" if t.wasted else "ok",
        ),
        Tile(
            "avoided_spend",
            "Spend avoided",
            amount(t.avoided, cur),
            runs_url(window, flag="avoided_spend", expect=t.avoided_runs),
            sub=f"against status-aware retries (retryable failures only, up to "
            f"{baseline.MAX_ATTEMPTS} attempts, after their Retry-After): what they would have "
            f"cost on {t.avoided_runs:,} failures routed elsewhere, and "
            f"{duration(t.avoided_seconds)} of their waiting and calls",
            tone="ok" if t.avoided else "",
        ),
        Tile(
            "time_lost",
            "Time lost to failures",
            duration(t.lost) if t.failures else "0 s",
            runs_url(window, status=failures, expect=t.failures),
            sub=f"{t.failures:,} failures · waiting for providers {duration(t.provider)} · "
            f"work {duration(t.work)}",
        ),
        Tile(
            "human_wait",
            "Waiting for a human",
            duration(t.human) if t.reviewed else "0 s",
            runs_url(window, status=failures, flag="reviewed", expect=t.reviewed),
            sub=f"{t.reviewed:,} failures escalated to review",
            tone="warn" if t.human else "",
        ),
    ]
