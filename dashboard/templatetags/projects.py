"""The top bar's project switcher."""

from __future__ import annotations

from typing import Any

from django import template

from dashboard.access import choose_scope

register = template.Library()


@register.inclusion_tag("dashboard/_project_switcher.html", takes_context=True)
def project_switcher(context: template.Context) -> dict[str, Any]:
    """The projects the user may switch between and the chosen one; a user who may see one
    project of several sees its name alone, and a deployment of one project nothing."""
    request = context.get("request")
    if request is None or not request.user.is_authenticated:
        return {"scope": None}
    return {
        "scope": choose_scope(request),
        "request": request,
        "csrf_token": context.get("csrf_token"),
    }
