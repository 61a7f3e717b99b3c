"""The top bar's search: one page with a section per kind, each in keyset pages of its own."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard import finder
from dashboard.access import VIEW, requires
from dashboard.views.common import wants_fragment

SECTION_TARGET = "search-"
# Each kind's page is its list's URL and the id ("/runs/" + "42/"): four reverse() calls a page
# instead of one per hit.
LISTS = {
    "runs": "dashboard:runs",
    "reviews": "dashboard:review_queue",
    "workflows": "dashboard:workflows",
    "groups": "dashboard:failure_groups",
}


@requires(VIEW)
@require_GET
def search(request: HttpRequest) -> HttpResponse:
    """Runs, review items, workflows and failure groups matching the text, newest first; a
    section's "more" link (htmx) swaps that section alone. "run 42" goes to run 42's page."""
    form = finder.SearchForm(request.GET)
    valid = form.is_valid()
    text = form.cleaned_data.get("q", "").strip() if valid else ""
    if valid and (page := finder.named_page(request.user, text)):
        return redirect(page)
    context: dict[str, Any] = {
        "form": form,
        "text": text,
        "sections": [],
        "runs_url": "",
        "prefixes": {kind: reverse(name) for kind, name in LISTS.items()},
    }
    only = _target_section(request)
    if valid and text:
        now = timezone.now()
        query = finder.read(text, now)
        cursors = {kind.name: form.cleaned_data[kind.name] for kind in finder.KINDS}
        found = finder.sections(request.user, query, now, cursors, only)
        context["sections"] = _with_links(found, request)
        context["runs_url"] = finder.runs_list_url(query)
        context["window_days"] = finder.RUNS_WINDOW.days
    if only and len(context["sections"]) == 1:
        context["section"] = context["sections"][0]
        return render(request, "dashboard/search.html#section", context)
    template = "dashboard/search.html"
    if wants_fragment(request):
        template += "#results"
    status = 400 if not valid and not wants_fragment(request) else 200
    return render(request, template, context, status=status)


def _with_links(sections: list[finder.Section], request: HttpRequest) -> list[finder.Section]:
    """Each section's "more" and "first" links: the query string with its own cursor moved."""
    for section in sections:
        params = request.GET.copy()
        params.pop(section.name, None)
        section.first_href = "?" + params.urlencode()
        if section.next:
            params[section.name] = section.next
            section.more_href = "?" + params.urlencode()
    return sections


def _target_section(request: HttpRequest) -> str:
    """The kind whose section an htmx "more" link swaps, if that is what asked."""
    if not wants_fragment(request):
        return ""
    target = request.htmx.target or ""
    name = target.removeprefix(SECTION_TARGET)
    return name if target.startswith(SECTION_TARGET) and name in finder.BY_NAME else ""
