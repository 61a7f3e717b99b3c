"""A review item on one line (the queue's row, the head of the item's page and of its card), built
as one string: as an included template it was about a third of the queue page's time, fifty
includes of ten lines of tags and filters each."""

from __future__ import annotations

from functools import lru_cache
from html import escape  # what django.utils.html.escape does, without its lazy-string check
from typing import Any
from urllib.parse import quote

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.safestring import SafeString, mark_safe

from dashboard.templatetags.dashboard import (
    BIDI_CONTROLS,
    age,
    clip,
    failure_badge,
    failure_icon,
    first_line,
    isolate,
)
from orchestrator.models import ReviewItem

register = template.Library()


def bdi(value: Any) -> str:
    """`isolate`, with its common case (no direction control) in line: for the rows built as
    one string here and in run_rows."""
    text = "" if value is None else str(value)
    if BIDI_CONTROLS.search(text):
        return isolate(text)
    return f"<bdi>{escape(text)}</bdi>"


@lru_cache(maxsize=64)
def _badge(failure_type: str | None) -> str:
    return failure_badge(failure_type)


@register.simple_tag(takes_context=True)
def review_summary(context: template.Context, item: ReviewItem) -> SafeString:
    """Every agent-sent string goes through `isolate` (escaped inside a <bdi>); every other value
    is escaped here."""
    prefix = escape(context.get("review_prefix", ""))
    pk = int(item.pk)
    parts = [
        _badge(item.failure_type),
        f'<a class="qid" href="{prefix}{pk}/">#{pk}</a>',
        f'<span class="qwho">{bdi(item.agent)} <span class="muted">@</span> '
        f"{bdi(item.source)}</span>",
        f'<span class="qreason">{bdi(clip(first_line(item.reason), 140))}</span>',
        _group_pill(item, prefix),
        f'<span class="qmeta muted small">{_workflow(item)}{escape(item.get_origin_display())}'
        "</span>",
        f'<span class="qstate">{_state(item)}</span>',
        f'<span class="qage muted small nowrap">{_age(item)}</span>',
    ]
    return mark_safe("\n".join(parts) + "\n")  # each part escaped above


def _group_pill(item: ReviewItem, prefix: str) -> str:
    size = getattr(item, "group_size", 1)
    if not size or size <= 1:
        return ""
    return (
        f'<a class="pill" href="{prefix}?view=groups&amp;signature={escape(item.signature)}" '
        f'title="Open items with the same signature">\u00d7{int(size)} like this</a>'
    )


def _workflow(item: ReviewItem) -> str:
    if not item.workflow_id:
        return ""
    return f"{bdi(clip(item.workflow.name, 40))} · "


def _username(user: Any, default: str) -> str:
    name = user.get_username() if user is not None else ""
    return escape(name or default)


def _state(item: ReviewItem) -> str:
    if item.state == ReviewItem.State.RESOLVED:
        return f'<span class="badge st-succeeded">{escape(item.get_resolution_display())}</span>'
    if item.state == ReviewItem.State.CLAIMED:
        who = "you" if getattr(item, "mine", False) else _username(item.assignee, "?")
        return f'<span class="badge st-claimed">claimed by {who}</span>'
    return '<span class="badge st-open">open</span>'


def _age(item: ReviewItem) -> str:
    if item.state != ReviewItem.State.RESOLVED:
        return f"waiting {escape(age(item.created_at))}"
    text = f"by {_username(item.resolved_by, 'the fallback')}, {escape(age(item.resolved_at))} ago"
    if item.is_built_in:
        return text
    if item.delivered_at:
        when = escape(date_format(timezone.localtime(item.delivered_at), "c"))
        via = escape(item.get_delivered_via_display())
        return f'{text} · <span title="{when}">picked up by the agent ({via})</span>'
    if item.is_pickup_overdue:
        return f'{text} · <span class="pill warn">not picked up (agent gone?)</span>'
    return f"{text} · not picked up yet"


# The queue's facets and its signature groups, one string each, for the same reason as the rows:
# 42 facet options and 48 groups as template loops were half of the page's rendering at 10M runs.


@register.simple_tag
def queue_facets(facets: list[tuple[str, str, list[Any]]]) -> SafeString:
    """Each facet with options as a <section> of links (htmx-swapped by the enclosing aside);
    option labels come from agents, so each goes through `isolate`."""
    out = []
    for name, title, options in facets:
        if not options:
            continue
        items = [
            f'<section class="facet" data-facet="{escape(name)}">',
            f"  <h3>{escape(str(title))}</h3>",
            "  <ul>",
        ]
        icon = name == "failure_type"
        for o in options:
            href = escape(o.href)
            classes = ("selected" if o.selected else "") + ("" if o.count else " zero")
            current = ' aria-current="true"' if o.selected else ""
            mark = str(failure_icon(o.value)) if icon else ""
            items.append(
                f'    <li><a href="{href}" hx-get="{href}" class="{classes}"{current} '
                f'data-value="{escape(o.value)}"><span>{mark}{bdi(o.label)}</span>'
                f"<b>{int(o.count)}</b></a></li>"
            )
        items += ["  </ul>", "</section>"]
        out.append("\n".join(items))
    return mark_safe("\n".join(out) + "\n")  # each value escaped above


@register.simple_tag(takes_context=True)
def signature_group(context: template.Context, g: Any) -> SafeString:
    """One group of the grouped queue: its badge, source, counts, links, its oldest item's reason
    and (for a reviewer) the resolve form that loads when opened."""
    review_prefix = escape(context.get("review_prefix", ""))
    groups_prefix = escape(context.get("groups_prefix", ""))
    count = int(g.count)
    held = f" · {int(g.held_by_others)} held by others" if g.held_by_others else ""
    parts = [
        f'<li class="card sig-group" data-signature="{escape(g.signature)}">',
        '  <div class="sig-head">',
        f"    {_badge(g.failure_type)} <strong>{bdi(g.source)}</strong>",
        f'    <span class="count-big">{count}</span> <span class="muted small">'
        f"item{'' if count == 1 else 's'} you can resolve{held} · oldest waiting "
        f"{escape(age(g.oldest))}</span>",
        f'    <a class="small" href="?signature={escape(quote(g.signature))}">show them</a>',
    ]
    if g.failure_group:
        pk = int(g.failure_group)
        parts.append(f'    <a class="small" href="{groups_prefix}{pk}/">failure group #{pk}</a>')
    parts.append("  </div>")
    if g.item is not None:
        reason = bdi(clip(first_line(g.item.reason), 200))
        parts.append(f'  <p class="sig-reason">{reason}</p>')
        if context.get("can_review") and count:
            item = f"{review_prefix}{int(g.item.pk)}/"
            following = escape(context.get("group_next", ""))
            parts += [
                f'  <details class="sig-resolve" hx-get="{item}?part=group&amp;next={following}" '
                'hx-trigger="toggle once" hx-target="find .group-form" hx-swap="innerHTML">',
                "    <summary>Resolve all like this…</summary>",
                '    <div class="group-form"><p class="muted small">Loading the resolutions… or '
                f'open <a href="{item}">review #{int(g.item.pk)}</a>.</p></div>',
                "  </details>",
            ]
    parts.append("</li>")
    return mark_safe("\n".join(parts) + "\n")  # each value escaped above
