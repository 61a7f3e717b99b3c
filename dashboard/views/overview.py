"""The overview: the status tiles and their refreshed fragments."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.access import VIEW, requires
from dashboard.tiles import attention_tiles, cached_fragments
from dashboard.views.common import poll_seconds, wants_fragment
from insights.stats import WINDOWS, get_window


@requires(VIEW)
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    window = get_window(request.GET.get("window"))

    def render_counted(tiles: dict[str, Any]) -> dict[str, str]:
        return {
            name: render_to_string(f"dashboard/overview.html#{name}", tiles)
            for name in ("counted", "recovery")
        }

    start = window.bounds(timezone.now())[1]
    context = {
        "window": window,
        "windows": WINDOWS.values(),
        "poll_seconds": poll_seconds(),
        "fragments": cached_fragments(window, render_counted),
        "attention": attention_tiles(window, start),
    }
    template = (
        "dashboard/overview.html#tiles" if wants_fragment(request) else "dashboard/overview.html"
    )
    return render(request, template, context)
