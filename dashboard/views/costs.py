"""What failures cost: spend, wasted spend, spend avoided and time lost over the overview's
windows, a table per dimension (failure type, source, agent, project), every number linked to the
runs it adds up, the spend budgets, and the tables as CSV (`format=csv`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.access import VIEW, project_scope, requires, sees_every_project
from dashboard.filters import RunFilters
from dashboard.tiles import amount, cost_tiles, runs_url
from dashboard.views.common import download
from insights import baseline, costs
from insights.stats import FAILURE_STATUSES, WINDOWS, Window, get_window
from orchestrator.analytics import export
from orchestrator.coordination import spend
from orchestrator.models import FailureType

TITLES = {
    "failure_type": "By failure type",
    "source": "By source",
    "agent": "By agent",
    "project": "By project",
}
HEADERS = {
    "failure_type": "Failure type",
    "source": "Source",
    "agent": "Agent",
    "project": "Project",
}
CSV_HEADER = [
    "dimension",
    "value",
    "currency",
    "spend",
    "priced_runs",
    "wasted_spend",
    "wasted_runs",
    "spend_avoided",
    "avoided_runs",
    "time_avoided_seconds",
    "time_lost_seconds",
    "provider_wait_seconds",
    "human_wait_seconds",
    "work_seconds",
    "failures",
    "reviewed_failures",
]


@dataclass
class Row:
    """One line of a table as shown: its label and the lists its numbers link to."""

    line: costs.Line
    label: str
    links: dict[str, str]


def _filter_of(dimension: str, key: str) -> dict[str, Any] | None:
    """The runs list's filter for one row (None: the list cannot select it exactly)."""
    if dimension == "failure_type":
        return {"failure_type": key} if key else {"flag": ["no_failure"]}
    if dimension == "project":
        return {"project": key} if "project" in RunFilters.base_fields and key else None
    return {dimension: key}


def _links(window: Window, dimension: str | None, key: str) -> dict[str, str]:
    where = {} if dimension is None else _filter_of(dimension, key)
    if where is None:
        return {}
    failures = list(FAILURE_STATUSES)
    also = where.pop("flag", [])  # the row's own flag, beside each number's

    def url(*flags: str, **params: Any) -> str:
        return runs_url(
            window, **params, **where, **({"flag": [*flags, *also]} if flags or also else {})
        )

    return {
        "spend": url("priced"),
        "wasted": url("wasted_spend"),
        "avoided": url("avoided_spend"),
        "lost": url(status=failures),
        "human": url("reviewed", status=failures),
    }


def _labels(dimension: str, keys: list[str]) -> dict[str, str]:
    if dimension == "failure_type":
        named = dict(FailureType.choices)
        return {
            k: str(named.get(k, k)) if k else "no failure (succeeded or unfinished)" for k in keys
        }
    if dimension == "project":
        from orchestrator.models import Project

        ids = [int(k) for k in keys if k.isdigit()]
        names = dict(Project.objects.filter(pk__in=ids).values_list("pk", "slug"))
        return {k: names.get(int(k), f"project {k}") if k.isdigit() else "—" for k in keys}
    return {k: k for k in keys}


def tables(window: Window, report: costs.Report) -> list[tuple[str, str, str, list[Row]]]:
    out = []
    for dimension in costs.dimensions():
        lines = report.lines(dimension)
        labels = _labels(dimension, [line.key for line in lines])
        rows = [Row(line, labels[line.key], _links(window, dimension, line.key)) for line in lines]
        out.append((dimension, TITLES[dimension], HEADERS[dimension], rows))
    return out


def csv_rows(report: costs.Report) -> list[list[Any]]:
    """Every table's rows, after the total: amounts to the micro-unit, times in seconds."""
    rows = []
    pairs = [("total", "", report.total)] + [
        (dimension, line.key, line)
        for dimension in costs.dimensions()
        for line in report.lines(dimension)
    ]
    for dimension, key, line in pairs:
        values = line.as_row("value")
        values["value"] = key
        rows.append([dimension, key, report.currency, *[values[h] for h in CSV_HEADER[3:]]])
    return rows


@requires(VIEW)
@require_GET
def costs_page(request: HttpRequest) -> HttpResponse:
    window = get_window(request.GET.get("window"))
    # The chosen projects' runs, as the runs lists the numbers link to show them.
    report = costs.cached_report(window, projects=project_scope(request.user))
    if request.GET.get("format") == "csv":
        lines = export.csv_lines(CSV_HEADER, csv_rows(report))
        return download(lines, "csv", f"costs-{window.name}")
    context = {
        "window": window,
        "windows": WINDOWS.values(),
        "report": report,
        "tiles": cost_tiles(window, report),
        "total_links": _links(window, None, ""),
        "tables": tables(window, report),
        # Spend budgets are per source and agent, spent by every project: shown to operators
        # who may see every project.
        "budgets": spend.states(timezone.now()) if sees_every_project(request.user) else None,
        "budgets_hidden": not sees_every_project(request.user),
        "amount": amount,
        # Nothing priced: every amount reads 0.00, and the page says why and what to do.
        "no_cost": not report.total.priced_runs,
        "aware_attempts": baseline.MAX_ATTEMPTS,
    }
    return render(request, "dashboard/costs.html", context)
