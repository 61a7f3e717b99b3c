"""A review item on one line (the queue's row, the head of the item's page and of its card), the
queue's facets and its signature groups, each built by one tag: as included templates and loops
they were about a third of the queue page's time, fifty includes of ten lines of tags and filters
each. Built through `format_html`/`format_html_join`, which escape every value they are given; the
row's reference template, which it equals byte for byte, is benchmarks/dashboard_rows.py's
REVIEW_SUMMARY."""

from __future__ import annotations

from functools import lru_cache
from typing import Any
from urllib.parse import quote

from django import template
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from dashboard.templatetags.dashboard import (
    age,
    clip,
    failure_badge,
    failure_icon,
    first_line,
    isolate,
    isolated,
)
from orchestrator.models import ReviewItem

register = template.Library()

# The row's format, assembled from these constant pieces by which parts an item has (`_summary`):
# one format_html call a row, every value escaped by it.
HEAD = (
    "{badge}\n"
    '<a class="qid" href="{prefix}{pk}/">#{pk}</a>\n'
    '<span class="qwho"><bdi{agent_warning}>{agent}</bdi> <span class="muted">@</span> '
    "<bdi{source_warning}>{source}</bdi></span>\n"
    '<span class="qreason"><bdi{reason_warning}>{reason}</bdi></span>\n'
)
GROUP_PILL = (
    '<a class="pill" href="{prefix}?view=groups&amp;signature={signature}" '
    'title="Open items with the same signature">\u00d7{size} like this</a>'
)
META = '\n<span class="qmeta muted small">'
WORKFLOW = "<bdi{name_warning}>{name}</bdi> · "
STATE = {
    ReviewItem.State.OPEN: '<span class="badge st-open">open</span>',
    ReviewItem.State.CLAIMED: '<span class="badge st-claimed">claimed by {who}</span>',
    ReviewItem.State.RESOLVED: '<span class="badge st-succeeded">{resolution}</span>',
}
# A repair item: the work went on on another source, nothing waits on it (the queue lists it
# after the items work waits on).
REPAIR = (
    ' <span class="pill" title="The work went on on another source: nothing waits on this">'
    "work went on</span>"
)
WAITING = "waiting {waited}"
RESOLVED = "by {resolver}, {ago} ago"
# After RESOLVED, for an agent's item: whether its agent picked the resolution up.
PICKUP = {
    "built_in": "",
    "delivered": ' · <span title="{when}">picked up by the agent ({via})</span>',
    "overdue": ' · <span class="pill warn">not picked up (agent gone?)</span>',
    "waiting": " · not picked up yet",
}


@lru_cache(maxsize=64)
def _summary(group: bool, workflow: bool, state: str, pickup: str | None, blocking: bool) -> str:
    return (
        HEAD
        + (GROUP_PILL if group else "")
        + META
        + (WORKFLOW if workflow else "")
        + '{origin}</span>\n<span class="qstate">'
        + STATE[state]
        + ("" if blocking else REPAIR)
        + '</span>\n<span class="qage muted small nowrap">'
        + (WAITING if pickup is None else RESOLVED + PICKUP[pickup])
        + "</span>\n"
    )


@lru_cache(maxsize=64)
def _badge(failure_type: str | None) -> SafeString:
    return failure_badge(failure_type)


@register.simple_tag(takes_context=True)
def review_summary(context: template.Context, item: ReviewItem) -> SafeString:
    """Every agent-sent string is escaped inside a <bdi> (`isolate`'s markup)."""
    values = {
        "badge": _badge(item.failure_type),
        "prefix": context.get("review_prefix", ""),
        "pk": item.pk,
        **isolated("agent", item.agent),
        **isolated("source", item.source),
        **isolated("reason", clip(first_line(item.reason), 140)),
        "origin": item.get_origin_display(),
    }
    size = getattr(item, "group_size", 1)
    group = bool(size and size > 1)
    if group:
        values |= {"signature": item.signature, "size": size}
    if item.workflow_id:
        values |= isolated("name", clip(item.workflow.name, 40))
    if item.state == ReviewItem.State.CLAIMED:
        mine = getattr(item, "mine", False)
        values["who"] = "you" if mine else _username(item.assignee, "?")
    pickup = None
    if item.state == ReviewItem.State.RESOLVED:
        values["resolution"] = item.get_resolution_display()
        values["resolver"] = _username(item.resolved_by, "the fallback")
        values["ago"] = age(item.resolved_at)
        pickup = _pickup(item, values)
    else:
        values["waited"] = age(item.created_at)
    summary = _summary(group, bool(item.workflow_id), item.state, pickup, item.blocking)
    return format_html(summary, **values)


def _pickup(item: ReviewItem, values: dict[str, Any]) -> str:
    """Which PICKUP a resolved item shows, its values added to `values`."""
    if item.is_built_in:
        return "built_in"
    if item.delivered_at:
        values["when"] = date_format(timezone.localtime(item.delivered_at), "c")
        values["via"] = item.get_delivered_via_display()
        return "delivered"
    return "overdue" if item.is_pickup_overdue else "waiting"


def _username(user: Any, default: str) -> str:
    name = user.get_username() if user is not None else ""
    return name or default


# The queue's facets and its signature groups, one string each, for the same reason as the rows:
# 42 facet options and 48 groups as template loops were half of the page's rendering at 10M runs.


@register.simple_tag
def queue_facets(facets: list[tuple[str, str, list[Any]]]) -> SafeString:
    """Each facet with options as a <section> of links (htmx-swapped by the enclosing aside);
    option labels come from agents, so each goes through `isolate`."""
    sections = [
        format_html(
            '<section class="facet" data-facet="{}">\n  <h3>{}</h3>\n  <ul>\n{}\n  </ul>\n'
            "</section>",
            name,
            title,
            format_html_join("\n", FACET_OPTION, _options(name, options)),
        )
        for name, title, options in facets
        if options
    ]
    return format_html("{}\n", format_html_join("\n", "{}", ((section,) for section in sections)))


FACET_OPTION = (
    '    <li><a href="{href}" hx-get="{href}" class="{classes}"{current} data-value="{value}">'
    "<span>{mark}{label}</span><b>{count}</b></a></li>"
)
CURRENT = format_html(' aria-current="{}"', "true")


def _options(name: str, options: list[Any]) -> list[dict[str, Any]]:
    """Each option's values for FACET_OPTION (format_html_join takes a mapping per item)."""
    icon = name == "failure_type"
    return [
        {
            "href": o.href,
            "classes": ("selected" if o.selected else "") + ("" if o.count else " zero"),
            "current": CURRENT if o.selected else "",
            "value": o.value,
            "mark": failure_icon(o.value) if icon else "",
            "label": isolate(o.label),
            "count": int(o.count),
        }
        for o in options
    ]


SIGNATURE_GROUP = (
    '<li class="card sig-group" data-signature="{signature}">\n'
    '  <div class="sig-head">\n'
    "    {badge} <strong>{source}</strong>\n"
    '    <span class="count-big">{count}</span> <span class="muted small">'
    "item{plural} you can resolve{held} · oldest waiting {oldest}</span>\n"
    '    <a class="small" href="?signature={quoted}">show them</a>\n'
    "{failure_group}"
    "  </div>\n"
    "{oldest_item}"
    "</li>\n"
)


@register.simple_tag(takes_context=True)
def signature_group(context: template.Context, g: Any) -> SafeString:
    """One group of the grouped queue: its badge, source, counts, links, its oldest item's reason
    and (for a reviewer) the resolve form that loads when opened."""
    count = int(g.count)
    return format_html(
        SIGNATURE_GROUP,
        signature=g.signature,
        badge=_badge(g.failure_type),
        source=isolate(g.source),
        count=count,
        plural="" if count == 1 else "s",
        held=format_html(" · {} held by others", g.held_by_others) if g.held_by_others else "",
        oldest=age(g.oldest),
        quoted=quote(g.signature),
        failure_group=format_html(
            '    <a class="small" href="{}{}/">failure group #{}</a>\n',
            context.get("groups_prefix", ""),
            g.failure_group,
            g.failure_group,
        )
        if g.failure_group
        else "",
        oldest_item=_oldest_item(context, g, count),
    )


GROUP_FORM = (
    '  <details class="sig-resolve" hx-get="{item}?part=group&amp;next={following}" '
    'hx-trigger="toggle once" hx-target="find .group-form" hx-swap="innerHTML">\n'
    "    <summary>Resolve all like this…</summary>\n"
    '    <div class="group-form"><p class="muted small">Loading the resolutions… or '
    'open <a href="{item}">review #{pk}</a>.</p></div>\n'
    "  </details>\n"
)


def _oldest_item(context: template.Context, g: Any, count: int) -> SafeString | str:
    """The oldest item's reason and, for a reviewer, the group's resolve form."""
    if g.item is None:
        return ""
    form = ""
    if context.get("can_review") and count:
        form = format_html(
            GROUP_FORM,
            item=f"{context.get('review_prefix', '')}{int(g.item.pk)}/",
            following=context.get("group_next", ""),
            pk=g.item.pk,
        )
    reason = isolate(clip(first_line(g.item.reason), 200))
    return format_html('  <p class="sig-reason">{}</p>\n{}', reason, form)
