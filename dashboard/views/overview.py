"""The overview: the status tiles and their refreshed fragments."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.access import VIEW, project_scope, requires, sees_every_project
from dashboard.tiles import attention_tiles, cached_fragments, cost_tiles
from dashboard.views.common import poll_seconds, wants_fragment
from insights import costs
from insights.stats import WINDOWS, get_window


@requires(VIEW)
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    window = get_window(request.GET.get("window"))

    # The failure groups count every project: no link to them for an operator who may see only
    # some (the fragments cached for every project are rendered for those who see all).
    no_groups = not sees_every_project(request.user)

    def render_counted(tiles: dict[str, Any]) -> dict[str, str]:
        return {
            name: render_to_string(
                f"dashboard/overview.html#{name}", tiles | {"no_groups": no_groups}
            )
            for name in ("counted", "recovery")
        }

    start = window.bounds(timezone.now())[1]
    projects = project_scope(request.user)
    context = {
        "window": window,
        "windows": WINDOWS.values(),
        "poll_seconds": poll_seconds(),
        "fragments": cached_fragments(window, render_counted, projects),
        "attention": attention_tiles(window, start, projects),
        "costs": cost_tiles(window, costs.cached_report(window, projects=projects)),
        "no_groups": no_groups,
    }
    template = (
        "dashboard/overview.html#tiles" if wants_fragment(request) else "dashboard/overview.html"
    )
    return render(request, template, context)
