"""A row of the runs list built by one tag: fifty rows of nine cells of tags and filters were most
of the list's rendering at 10M runs (the runs list, its searches and a failure group's runs all
show them). Built through `format_html`, which escapes every value it is given; the reference
template it equals byte for byte is benchmarks/dashboard_rows.py's RUN_ROW."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.html import format_html
from django.utils.safestring import SafeString

from dashboard.templatetags.dashboard import (
    brief_json,
    clip,
    isolated,
    run_badge,
)

register = template.Library()

# The row's format, assembled from these constant pieces by which parts a run has (`_row`): one
# format_html call a row, every value escaped by it.
HEAD = '<tr class="{css}">\n'
BOX = (
    '  <td><input type="checkbox" name="run" value="{pk}" data-actions="{actions}" '
    'aria-label="Select run {pk}"></td>\n'
)
NO_BOX = "  <td></td>\n"  # a run no action applies to
OUTCOME = '  <td><a href="{runs_prefix}{pk}/">#{pk}</a></td>\n  <td>{badge}'
PARTIAL = ' <span class="pill" title="partial results kept">{partial} partial</span>'
CALL = (
    "</td>\n"
    '  <td><bdi{agent_warning}>{agent}</bdi> <span class="muted">@</span> '
    "<bdi{source_warning}>{source}</bdi></td>\n"
    '  <td class="clip"><bdi{attempted_warning}>{attempted}</bdi></td>\n'
    "  <td>{attempt}</td>\n"
    "  <td>"
)
WORKFLOW = '<a href="{workflows_prefix}{workflow}/"><bdi{name_warning}>{name}</bdi></a>'
NO_WORKFLOW = '<span class="muted">—</span>'
TAIL = (
    "</td>\n"
    '  <td class="clip mono"><bdi{detail_warning}>{detail}</bdi></td>\n'
    '  <td class="nowrap"><time datetime="{created}">{shown}</time></td>\n'
    "</tr>\n"
)


@lru_cache(maxsize=16)
def _row(box: str, partial: bool, workflow: bool) -> str:
    return (
        HEAD
        + box
        + OUTCOME
        + (PARTIAL if partial else "")
        + CALL
        + (WORKFLOW if workflow else NO_WORKFLOW)
        + TAIL
    )


@register.simple_tag(takes_context=True)
def run_row(context: template.Context, run: Any) -> SafeString:
    """Every agent-sent string is escaped inside a <bdi> (`isolate`'s markup)."""
    created = run.created_at
    values = {
        "css": "row-empty" if run.is_valid_empty else "row-failed" if run.failure_type else "",
        "runs_prefix": context.get("runs_prefix", ""),
        "pk": run.pk,
        "badge": run_badge(run),
        **isolated("agent", run.agent),
        **isolated("source", run.source),
        **isolated("attempted", brief_json(run.attempted)),
        "attempt": run.attempt,
        **isolated("detail", clip(run.detail, 100)),
        "created": created.isoformat(),
        "shown": date_format(timezone.localtime(created), "M j H:i:s"),
    }
    box = ""
    if context.get("can_review") and context.get("bulk_actions"):
        box = BOX if run.actions else NO_BOX
        if run.actions:
            values["actions"] = " ".join(str(a) for a in run.actions)
    if run.partial_count:
        values["partial"] = run.partial_count
    workflow = bool(run.workflow_id and run.workflow is not None)
    if workflow:
        values["workflows_prefix"] = context.get("workflows_prefix", "")
        values["workflow"] = run.workflow_id
        values |= isolated("name", clip(run.workflow.name, 30))
    return format_html(_row(box, bool(run.partial_count), workflow), **values)
