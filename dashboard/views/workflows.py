"""Workflows: the list, a workflow's page with its timeline and coverage export, aborting one."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard import reports
from dashboard.access import REVIEW, VIEW, get_visible, requires, visible
from dashboard.views.common import LIST_DEFER
from insights.stats import WINDOWS
from orchestrator import counters, keyset
from orchestrator.analytics import export
from orchestrator.coordination.actions import do_abort_workflow
from orchestrator.models import (
    ReviewItem,
    Run,
    Workflow,
)
from orchestrator.vocabulary import Channel


@requires(VIEW)
@require_GET
def workflows(request: HttpRequest) -> HttpResponse:
    qs = visible(request.user, Workflow)
    status = request.GET.get("status", "")
    if status in Workflow.Status.values:
        qs = qs.filter(status=status)
    window = request.GET.get("range", "")
    if window in WINDOWS:
        qs = qs.filter(created_at__gte=WINDOWS[window].bounds(timezone.now())[1])
    try:
        after = keyset.decode_cursor(request.GET["after"]) if request.GET.get("after") else None
    except ValueError:
        messages.error(request, "That page link was damaged: here are the newest workflows.")
        after = None
    # Counters kept with the runs (a live count of every listed workflow's runs on SQLite).
    page = keyset.page(counters.with_run_counts(qs), 30, after=after)
    context = {
        "workflows": page.rows,
        "next_cursor": page.next,
        "status": status,
        "range": window,
        "statuses": Workflow.Status.choices,
        "ranges": [(k, WINDOWS[k].label) for k in WINDOWS],
    }
    return render(request, "dashboard/workflows.html", context)


TIMELINE_LIMIT = 500


@requires(VIEW)
@require_GET
def workflow_detail(request: HttpRequest, pk: int) -> HttpResponse:
    workflow = get_visible(request.user, Workflow, pk=pk)
    runs = list(
        visible(request.user, Run)
        .filter(workflow=workflow)
        .defer(*LIST_DEFER)
        .order_by("created_at", "id")[: TIMELINE_LIMIT + 1]
    )
    reviews = list(
        visible(request.user, ReviewItem)
        .filter(workflow=workflow)
        .select_related("assignee", "resolved_by")
        .order_by("created_at", "id")
    )
    pending = [item for item in reviews if item.is_pending]
    context = {
        "workflow": workflow,
        "timeline": _timeline(runs[:TIMELINE_LIMIT], reviews),
        "run_count": min(len(runs), TIMELINE_LIMIT),
        "truncated": len(runs) > TIMELINE_LIMIT,
        "coverage": reports.coverage_topics(workflow.coverage),
        "open_reviews": pending,
        "can_review": request.user.has_perm(REVIEW),
    }
    return render(request, "dashboard/workflow_detail.html", context)


COVERAGE_FORMATS = {"json": "application/json", "md": "text/markdown; charset=utf-8"}


@requires(VIEW)
@require_GET
def workflow_coverage_export(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    """A workflow's coverage report as JSON or Markdown, to attach to what the workflow wrote."""
    workflow = get_visible(request.user, Workflow, pk=pk)
    if fmt not in COVERAGE_FORMATS:
        raise Http404
    report = export.coverage_report(workflow)
    if fmt == "json":
        body = json.dumps(report, indent=2, ensure_ascii=False, default=str)
    else:
        body = export.coverage_markdown(report)
    response = HttpResponse(body, content_type=COVERAGE_FORMATS[fmt])
    name = f"coverage-workflow-{workflow.pk}.{fmt}"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


def _timeline(runs: list[Run], reviews: list[ReviewItem]) -> list[dict[str, Any]]:
    """Runs and review decisions in time order: each escalation's resolution, who took it and
    what applying it did, beside the runs it started."""
    entries = [{"at": run.created_at, "run": run} for run in runs]
    for item in reviews:
        entries.append({"at": item.created_at, "opened": item})
        if item.resolved_at:
            entries.append({"at": item.resolved_at, "resolved": item})
    entries.sort(key=lambda e: (e["at"], "run" not in e))
    return entries


@requires(REVIEW)
@require_POST
def workflow_abort(request: HttpRequest, pk: int) -> HttpResponse:
    """Stop a workflow that cannot come to any good: a reason is required, and audited."""
    workflow = get_visible(request.user, Workflow, pk=pk)
    back = redirect("dashboard:workflow_detail", pk=workflow.pk)
    note = " ".join(request.POST.get("note", "").split())[:500]
    if not note:
        messages.error(request, "Say why the workflow is aborted: the reason is kept in the audit.")
        return back
    if do_abort_workflow(workflow.pk, request.user, channel=Channel.DASHBOARD, note=note):
        messages.success(request, "Workflow aborted: its pending runs were cancelled.")
    else:
        messages.info(request, "The workflow had already finished: nothing changed.")
    return back
