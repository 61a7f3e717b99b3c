"""Template helpers: failure-type badges, SVG sparklines and bars, pretty JSON, ages and deltas.
Nothing here marks agent-sent text safe; `isolate` escapes it inside a <bdi>, so no bidirectional
control character it carries can reorder the page around it."""

from __future__ import annotations

import json
import re
import unicodedata
from datetime import datetime
from functools import lru_cache
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from dashboard.access import in_scope
from insights.groups import ENDING_COLUMNS, Ending
from orchestrator.models import FailureType, ReviewItem, Run

register = template.Library()

# Icon symbol ids live in templates/_icons.html; one per failure type plus the run outcomes.
FAILURE_ICONS = {
    FailureType.TRANSIENT: "i-zap",
    FailureType.RATE_LIMITED: "i-hourglass",
    FailureType.AUTH_FAILURE: "i-lock",
    FailureType.RESOURCE_MISSING: "i-missing",
    FailureType.INVALID_INPUT: "i-brackets",
    FailureType.TIMEOUT: "i-clock",
    FailureType.SERVER_FAULT: "i-server",
    FailureType.UNCLASSIFIED: "i-question",
}
STATUS_ICONS = {
    Run.Status.SUCCEEDED: "i-check",
    Run.Status.FAILED: "i-x",
    Run.Status.ESCALATED: "i-flag",
    Run.Status.QUEUED: "i-dots",
    Run.Status.RUNNING: "i-dots",
    Run.Status.CANCELLED: "i-slash",
    Run.Status.SKIPPED: "i-slash",
}
PRETTY_JSON_LIMIT = 50_000


def _badge(css: str, icon: str, label: str, title: str = "") -> SafeString:
    return format_html(
        '<span class="badge {}" title="{}"><svg class="icon" aria-hidden="true">'
        '<use href="#{}"></use></svg>{}</span>',
        css,
        title or label,
        icon,
        label,
    )


@register.simple_tag
def failure_badge(failure_type: str | None) -> SafeString:
    """The coloured badge of a failure type (unknown values fall back to 'unclassified')."""
    value = failure_type if failure_type in FAILURE_ICONS else FailureType.UNCLASSIFIED
    label = str(FailureType(value).label) if failure_type in FAILURE_ICONS else str(failure_type)
    return _badge(f"ft ft-{value}", FAILURE_ICONS[value], label)


@register.simple_tag
def run_badge(run: Any) -> SafeString:
    """A run's outcome: 'empty (valid)' and failure types must never look alike."""
    return _outcome_badge(run.is_valid_empty, run.failure_type, run.status)


# Cached: the runs list's rows draw one of a few dozen badges, fifty times a page.
@lru_cache(maxsize=128)
def _outcome_badge(valid_empty: bool, failure_type: str | None, status: str) -> SafeString:
    if valid_empty:
        return _badge("st-empty", "i-empty", "empty (valid)", "The query ran and found nothing")
    if failure_type:
        return failure_badge(failure_type)
    return _badge(f"st-{status}", STATUS_ICONS.get(status, "i-dots"), status)


@register.simple_tag
def failure_icon(failure_type: str) -> SafeString:
    return format_html(
        '<svg class="icon ft-icon ft-{}" aria-hidden="true"><use href="#{}"></use></svg>',
        failure_type,
        FAILURE_ICONS.get(failure_type, "i-question"),
    )


@register.simple_tag
def sparkline(values: list[int], width: int = 120, height: int = 28) -> SafeString:
    """An inline SVG polyline of `values`, scaled to the box; numbers only, drawn on the server."""
    values = [float(v) for v in values] or [0.0]
    top = max(values) or 1.0
    step = width / max(len(values) - 1, 1)
    points = [
        (round(i * step, 1), round(height - 2 - (v / top) * (height - 4), 1))
        for i, v in enumerate(values)
    ]
    coords = " ".join(f"{x},{y}" for x, y in points)
    last_x, last_y = points[-1]
    return format_html(
        '<svg class="spark" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" '
        'aria-label="trend"><polyline fill="none" stroke="currentColor" stroke-width="1.5" '
        'points="{pts}"></polyline><circle cx="{x}" cy="{y}" r="2" fill="currentColor">'
        "</circle></svg>",
        w=width,
        h=height,
        pts=coords,
        x=last_x,
        y=last_y,
    )


# Characters that change the direction of the text after them: embeddings, overrides, isolates
# and marks. In an agent's text they can make "file\u202egnp.exe" read "fileexe.png".
BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@register.filter
def isolate(value: Any) -> SafeString:
    """An agent's string, escaped, inside <bdi>: its direction cannot leak into the page. One
    carrying direction controls is also marked, since inside its box it may still read otherwise."""
    text = "" if value is None else str(value)
    return format_html("<bdi{}>{}</bdi>", bidi_warning(text), text)


def bidi_warning(text: str) -> SafeString | str:
    """The attributes that mark a string carrying direction controls in its <bdi> (none for most
    strings): `isolate`'s, and the hot rows', which write the <bdi> in their own format."""
    if not BIDI_CONTROLS.search(text):
        return ""
    found = sorted({f"U+{ord(c):04X}" for c in BIDI_CONTROLS.findall(text)})
    title = "Contains bidirectional control characters (" + ", ".join(found) + "): "
    title += "this text may display in another order than it is written."
    return format_html(' class="bidi-warn" title="{}"', title)


def isolated(name: str, value: Any) -> dict[str, Any]:
    """An agent's string for a `<bdi{name_warning}>{name}</bdi>` in a hot row's format: `isolate`'s
    markup, written by the row's one format_html call instead of one call per string."""
    text = "" if value is None else str(value)
    return {name: text, f"{name}_warning": bidi_warning(text)}


@register.filter
def bidi_controls(value: Any) -> list[str]:
    """The bidirectional control characters in a string (or in a JSON value), named."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    chars = sorted(set(BIDI_CONTROLS.findall(text or "")))
    return [f"U+{ord(c):04X} {unicodedata.name(c, '').lower()}" for c in chars]


@register.filter
def escape_bidi(value: Any) -> str:
    """The text with each direction control written as its escape (\\u202e): what it is."""
    text = "" if value is None else str(value)
    return BIDI_CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


@register.filter
def plain(value: Any) -> str:
    """Text without direction controls, for places no element can isolate (the page title)."""
    return BIDI_CONTROLS.sub("", "" if value is None else str(value))


@register.filter
def first_line(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.strip().split("\n", 1)[0]


@register.filter
def pretty_json(value: Any) -> str:
    """Indented JSON as a plain (autoescaped) string, cut short past a size no one reads; direction
    controls written as JSON escapes (\\u202e)."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    text = BIDI_CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    if len(text) > PRETTY_JSON_LIMIT:
        return text[:PRETTY_JSON_LIMIT] + f"\n… ({len(text) - PRETTY_JSON_LIMIT} more characters)"
    return text


@register.filter
def clip(value: Any, limit: int = 100) -> str:
    """A plain slice with an ellipsis: truncatechars walks every character, this is O(1)."""
    text = str(value or "")
    return text if len(text) <= limit else text[: limit - 1] + "…"


@register.filter
def as_text(value: Any) -> str:
    """A string as it is, anything else as compact JSON (both autoescaped by the template)."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


@register.filter
def brief_json(value: Any, limit: int = 90) -> str:
    """One line summarising what was attempted (the query if there is one)."""
    if isinstance(value, dict):
        for key in ("query", "q", "url", "path", "operation"):
            if isinstance(value.get(key), str):
                value = value[key]
                break
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


@register.filter
def age(value: datetime | float | None) -> str:
    """'3 m', '2 h 5 m', '4 d' since a datetime, or for a number of seconds."""
    if value is None:
        return "—"
    seconds = (
        (timezone.now() - value).total_seconds() if isinstance(value, datetime) else float(value)
    )
    return duration(seconds)


@register.filter
def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = max(0.0, float(seconds))
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s".replace(".0 s", " s")
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} m" if minutes else f"{hours} h"
    return f"{hours // 24} d"


@register.simple_tag
def delta(current: float, previous: float, lower_is_better: bool = True) -> SafeString:
    """The change against the previous window, coloured by whether it is good news."""
    diff = current - previous
    if previous == 0 and current == 0:
        return format_html('<span class="delta flat">{}</span>', "±0")
    pct = "new" if previous == 0 else f"{diff / previous:+.0%}"
    good = (diff < 0) if lower_is_better else (diff > 0)
    css = "flat" if diff == 0 else ("good" if good else "bad")
    return format_html(
        '<span class="delta {}" title="previous window: {}">{}</span>', css, previous, pct
    )


@register.simple_tag
def stacked_bar(
    parts: list[tuple[str, int, str]], width: int = 160, height: int = 10
) -> SafeString:
    """A horizontal bar split by `parts` [(key, n, label)], each drawn with class `part-<key>`;
    SVG attributes rather than inline styles (the CSP refuses those)."""
    whole = sum(n for _, n, _ in parts) or 1
    x = 0.0
    rects = []
    for key, n, label in parts:
        if n <= 0:
            continue
        w = round(width * n / whole, 1)
        rects.append((x, w, height, key, label, int(n)))
        x += w
    body = format_html_join(
        "",
        '<rect x="{}" y="0" width="{}" height="{}" class="part-{}"><title>{}: {}</title></rect>',
        rects,
    )
    return format_html(
        '<svg class="bar" viewBox="0 0 {w} {h}" width="{w}" height="{h}" aria-hidden="true">'
        "{body}</svg>",
        w=width,
        h=height,
        body=body,
    )


@register.simple_tag
def ending_label(value: str) -> str:
    return Ending(value).label if value in {e.value for e in Ending} else value


@register.simple_tag
def stacked_bar_endings(counts: Any, width: int = 160) -> SafeString:
    """How a group's failures ended, as a bar (recovered by retry, by switch, escalated, …)."""
    parts = [
        (ending.value, getattr(counts, column), ending.label)
        for ending, column in ENDING_COLUMNS.items()
    ]
    return stacked_bar(parts, width)


@register.simple_tag(takes_context=True)
def open_review_count(context: template.Context) -> int | None:
    """For the nav bar; None when the user may not see the review queue."""
    request = context.get("request")
    if request is None or not request.user.has_perm("orchestrator.view_reviewitem"):
        return None
    if context.get("open_total") is not None:  # the queue page counted them already
        return context["open_total"]
    return in_scope(request.user, ReviewItem.objects.open()).count()


@register.simple_tag
def due_in(when: datetime | None, now: datetime | None = None) -> str:
    """'in 40 s', 'in 2 h 5 m', or 'now' once due: a delay an operator reads at a glance."""
    if when is None:
        return "—"
    seconds = (when - (now or timezone.now())).total_seconds()
    return f"in {duration(round(seconds))}" if seconds >= 1 else "now"


# What decided a failure's type (classifier.Signal), as a sentence an operator reads.
SIGNAL_WORDS = {
    "status": "the HTTP status",
    "provider_code": "the provider's error code",
    "type": "the exception's class",
    "message": "the wording of the error message",
    "none": "no recognisable signal (kept as unclassified)",
}


@register.simple_tag
def classified_by(run: Any) -> SafeString:
    """Which evidence gave the run its failure type, with the value it read, e.g. "the HTTP
    status 429" (whichever classifier read it: the agent's, or the server's again)."""
    words = SIGNAL_WORDS.get(run.signal, run.signal.replace("_", " "))
    value = {
        "status": run.status_code,
        "provider_code": run.provider_code,
        "type": run.exception_type.rpartition(".")[2],
    }.get(run.signal)
    if value:
        return format_html("{} <code>{}</code>", words, isolate(value))
    return format_html("{}", words)


@register.filter
def percent(value: float | None) -> str:
    """A share as a percentage with at most two decimals: 0.267 → '26.7 %', 0.9995 → '99.95 %'."""
    if value is None:
        return "—"
    text = f"{float(value) * 100:.2f}".rstrip("0").rstrip(".")
    return f"{text} %"


@register.filter
def multiple(value: float) -> str:
    """A multiple as precisely as it is worth reading: 73.33 is '73', 1.44 is '1.4'."""
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}".removesuffix(".0")


@register.filter
def cents(value: Any) -> str:
    """An amount of money to the cent (the CSV export keeps every digit)."""
    if value is None:
        return "—"
    return f"{value:,.2f}"
