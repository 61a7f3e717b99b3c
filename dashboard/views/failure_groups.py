"""Failure groups: the list over a window with sparklines, a group's page, and its state (muted,
resolved)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard.access import REVIEW, VIEW, every_project_page, get_visible, requires, visible
from dashboard.groups import HAS, GroupFilters, GroupRow
from dashboard.views.common import LIST_DEFER, wants_fragment
from insights import groups
from insights.models import FailureGroup
from orchestrator import keyset
from orchestrator.models import (
    FailureType,
    Run,
    Workflow,
)


@requires(VIEW)
@every_project_page
@require_GET
def failure_groups(request: HttpRequest) -> HttpResponse:
    """Failures grouped by signature, most recently seen first, with their counts in a window."""
    f = GroupFilters(request.GET)
    valid = f.is_valid()
    now = timezone.now()
    context: dict[str, Any] = {
        "f": f,
        "rows": [],
        "page": None,
        "windows": groups.GROUP_WINDOWS.values(),
        "states": FailureGroup.State.choices,
        "failure_types": FailureType.choices,
        "has_choices": [(k, label) for k, (label, _) in HAS.items()],
    }
    if valid:
        context |= _group_rows(request, f, now)
    template = "dashboard/groups.html"
    if wants_fragment(request):
        template += "#results"
    status = 400 if not valid and not wants_fragment(request) else 200
    return render(request, template, context, status=status)


def _group_rows(request: HttpRequest, f: GroupFilters, now: Any) -> dict[str, Any]:
    qs = f.apply(visible(request.user, FailureGroup))
    data = f.cleaned_data
    window = groups.GROUP_WINDOWS.get(data["range"])
    counts: dict[int, dict[str, int]] = {}
    if window is not None:
        counts = groups.window_counts(window, now)
        column = HAS[data["has"]][1] if data["has"] else "count"
        qs = qs.filter(pk__in=[pk for pk, c in counts.items() if c[column] > 0])
    elif data["has"]:
        qs = qs.filter(**{f"{HAS[data['has']][1]}__gt": 0})
    cursors = {name: data[name] for name in ("after", "before")}
    page = keyset.page(qs, 50, **cursors, field="last_seen")
    spark_window = window or groups.GROUP_WINDOWS["30d"]
    lines = groups.sparklines(spark_window, now, [g.pk for g in page.rows])
    rows = [GroupRow(g, counts.get(g.pk, {}), lines[g.pk]) for g in page.rows]
    return {"page": page, "rows": rows, "window": window, "spark_window": spark_window}


@requires(VIEW)
@every_project_page
@require_GET
def failure_group(request: HttpRequest, pk: int) -> HttpResponse:
    """One group: its numbers, how its failures were routed and ended, who was affected, and
    its latest runs each with how it ended."""
    group = get_visible(request.user, FailureGroup, related=("state_changed_by",), pk=pk)
    now = timezone.now()
    recent = (
        visible(request.user, Run)
        .filter(signature=group.signature)
        .select_related("workflow")
        .defer(*LIST_DEFER)
        .order_by("-created_at", "-id")
    )[:20]
    names = dict(Workflow.objects.filter(pk__in=group.workflows).values_list("pk", "name"))
    context = {
        "group": group,
        "spark": groups.daily(group, now),
        "runs": groups.add_endings(list(recent)),
        "endings": [(e, getattr(group, groups.ENDING_COLUMNS[e])) for e in groups.Ending],
        "decisions": [(a, getattr(group, c)) for a, c in groups.DECISION_COLUMNS.items()],
        "workflows": [(pk, names.get(pk, "?")) for pk in group.workflows],
        "open_reviews": groups.open_reviews(group),
        "can_review": request.user.has_perm(REVIEW),
        "states": FailureGroup.State,
    }
    return render(request, "dashboard/group_detail.html", context)


@requires(REVIEW)
@every_project_page
@require_POST
def failure_group_state(request: HttpRequest, pk: int) -> HttpResponse:
    """Open, mute or resolve a group (audited)."""
    group = get_visible(request.user, FailureGroup, pk=pk)
    state = request.POST.get("state", "")
    if state not in FailureGroup.State.values:
        messages.error(request, f"{state!r} is not a state of a failure group.")
    elif groups.set_state(group, state, request.user):
        messages.success(request, f"Group marked {FailureGroup.State(state).label}.")
    else:
        messages.info(request, f"The group was already {FailureGroup.State(state).label}.")
    return redirect("dashboard:failure_group", pk=group.pk)
