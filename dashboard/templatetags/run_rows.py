"""A row of the runs list built as one string: fifty rows of nine cells of tags and filters were
most of the list's rendering at 10M runs (the runs list, its searches and a failure group's runs
all show them)."""

from __future__ import annotations

from html import escape
from typing import Any

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.safestring import SafeString, mark_safe

from dashboard.templatetags.dashboard import brief_json, clip, run_badge
from dashboard.templatetags.review_rows import bdi

register = template.Library()


@register.simple_tag(takes_context=True)
def run_row(context: template.Context, run: Any) -> SafeString:
    """Every agent-sent string goes through `isolate` (escaped inside a <bdi>); every other value
    is escaped here."""
    pk = int(run.pk)
    css = "row-empty" if run.is_valid_empty else "row-failed" if run.failure_type else ""
    cells = [f'<tr class="{css}">']
    if context.get("can_review") and context.get("bulk_actions"):
        box = ""
        if run.actions:
            actions = escape(" ".join(str(a) for a in run.actions))
            box = (
                f'<input type="checkbox" name="run" value="{pk}" data-actions="{actions}" '
                f'aria-label="Select run {pk}">'
            )
        cells.append(f"  <td>{box}</td>")
    partial = (
        f' <span class="pill" title="partial results kept">{int(run.partial_count)} partial</span>'
        if run.partial_count
        else ""
    )
    if run.workflow_id and run.workflow is not None:
        prefix = escape(context.get("workflows_prefix", ""))
        name = bdi(clip(run.workflow.name, 30))
        workflow = f'<a href="{prefix}{int(run.workflow_id)}/">{name}</a>'
    else:
        workflow = '<span class="muted">—</span>'
    created = run.created_at
    shown = escape(date_format(timezone.localtime(created), "M j H:i:s"))
    cells += [
        f'  <td><a href="{escape(context.get("runs_prefix", ""))}{pk}/">#{pk}</a></td>',
        f"  <td>{run_badge(run)}{partial}</td>",
        f'  <td>{bdi(run.agent)} <span class="muted">@</span> {bdi(run.source)}</td>',
        f'  <td class="clip">{bdi(brief_json(run.attempted))}</td>',
        f"  <td>{int(run.attempt)}</td>",
        f"  <td>{workflow}</td>",
        f'  <td class="clip mono">{bdi(clip(run.detail, 100))}</td>',
        f'  <td class="nowrap"><time datetime="{escape(created.isoformat())}">{shown}</time></td>',
        "</tr>",
    ]
    return mark_safe("\n".join(cells) + "\n")  # each value escaped above
