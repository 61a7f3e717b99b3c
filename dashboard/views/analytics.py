"""Analytics pages: switch efficacy, the retry audit and the service-level objectives."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_GET

from dashboard.access import EDIT_POLICIES, VIEW, project_scope, requires
from dashboard.filterforms import canonical_failure_type
from dashboard.views.common import download
from insights import slo
from orchestrator.analytics import export, retryable
from orchestrator.coordination import efficacy
from orchestrator.models import (
    FailureType,
)


def _table_csv(name: str, rows: list[dict[str, Any]]) -> StreamingHttpResponse:
    header = list(rows[0]) if rows else ["empty"]
    lines = export.csv_lines(header, ([row[k] for k in header] for row in rows))
    return download(lines, "csv", name)


@requires(VIEW)
@require_GET
def switch_efficacy(request: HttpRequest) -> HttpResponse:
    """From-source to to-source: how often a switch worked, its added latency, partial results
    kept; overall or for one failure type. `format=csv` downloads every cell."""
    errors: list[str] = []
    ftype = canonical_failure_type(request.GET.get("failure_type", ""), errors)
    projects = project_scope(request.user)
    if projects is None:
        # Beat refreshes every project's matrix; computed here only before its first refresh.
        cells = efficacy.matrix() or efficacy.compute()
    else:
        # The chosen projects' switches, read from their runs.
        cells = efficacy.compute(projects=projects)
    if request.GET.get("format") == "csv":
        return _table_csv("switch-efficacy", [c.as_row() for c in cells.values()])
    chosen = {k: c for k, c in cells.items() if k[2] == ftype}
    sources_from = sorted({k[0] for k in chosen})
    sources_to = sorted({k[1] for k in chosen})
    grid = [(src, [chosen.get((src, dst, ftype)) for dst in sources_to]) for src in sources_from]
    context = {
        "grid": grid,
        "sources_to": sources_to,
        "failure_type": ftype,
        "failure_types": FailureType.choices,
        "errors": errors,
        "days": settings.SWITCH_EFFICACY_DAYS,
        "ordering": settings.SWITCH_EFFICACY_ORDERING,
        "least": settings.SWITCH_EFFICACY_MIN_SWITCHES,
    }
    return render(request, "dashboard/efficacy.html", context, status=400 if errors else 200)


@requires(VIEW)
@require_GET
def retry_audit(request: HttpRequest) -> HttpResponse:
    """Where the retry signal was wrong, by source, type and signal, each row one click from a
    prefilled provider override."""
    days = _days_param(request.GET.get("days"), retryable.DEFAULT_DAYS)
    projects = project_scope(request.user)
    futile_rows = retryable.futile(days, projects=projects)
    stuck_rows = retryable.never_recovered(days, projects=projects)
    if request.GET.get("format") == "csv":
        rows = [{"list": "futile", **r.as_row()} for r in futile_rows]
        rows += [{"list": "never_recovered", **r.as_row()} for r in stuck_rows]
        return _table_csv("retry-audit", rows)
    new_override = reverse("dashboard:override_new")
    context = {
        "days": days,
        "futile": [(r, _prefill(new_override, r)) for r in futile_rows],
        "stuck": [(r, _prefill(new_override, r)) for r in stuck_rows],
        "least": settings.RETRY_AUDIT_MIN_RETRIES,
        "can_edit": request.user.has_perm(EDIT_POLICIES),
    }
    return render(request, "dashboard/retry_audit.html", context)


def _prefill(base: str, row: retryable.AuditRow) -> str:
    return f"{base}?{urlencode(row.override_initial())}#overrides"


def _days_param(raw: str | None, default: float) -> float:
    try:
        days = float(raw) if raw else default
    except ValueError:
        return default
    return min(max(days, 1.0), 90.0) if days == days else default


# Service-level objectives


BURN_WINDOWS = ((5, "5 min"), (30, "30 min"), (60, "1 h"), (360, "6 h"))


def _slo_row(o: slo.Objective) -> dict[str, Any]:
    return {
        "kind": o.kind,
        "name": o.name,
        "objective": o.objective,
        "runs": o.total,
        "succeeded": o.good,
        "success_rate": None if o.success_rate is None else round(o.success_rate, 5),
        "error_budget_remaining": round(o.budget_remaining, 4),
        **{f"burn_rate_{m}m": round(o.burn_rate(m), 3) for m, _ in BURN_WINDOWS},
        "alerts": " ".join(o.alerts),
    }


@requires(VIEW)
@require_GET
def slos(request: HttpRequest) -> HttpResponse:
    """A tile per agent and per source: its objective, success over the SLO window, the error
    budget left, burn rates and which multi-window alert burns. `format=csv` for the table."""
    found = slo.objectives(projects=project_scope(request.user))
    if request.GET.get("format") == "csv":
        return _table_csv("slos", [_slo_row(o) for o in found])
    context = {
        "tiles": [(o, [(label, o.burn_rate(m)) for m, label in BURN_WINDOWS]) for o in found],
        "days": settings.SLO_WINDOW_DAYS,
        "objective": settings.SLO_OBJECTIVE,
        "fast": slo.FAST,
        "slow": slo.SLOW,
    }
    return render(request, "dashboard/slos.html", context)
