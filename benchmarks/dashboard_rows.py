"""The hot rows of the runs list and the review queue, rendered in memory (no database): sample
runs and review items, the tags that build their rows, and each row written plainly as a Django
template, the reference the tags must equal byte for byte (tests/dashboard/test_rows.py) and the
baseline `dashboard.py --row-cost` times them against."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

HOSTILE = ["<script>alert('pwned')</script>", '<img src=x onerror="alert(1)">', "a & b \"c\" 'd'"]
RLO = "\u202e"
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)

RUN_ROW = (
    "{% load dashboard %}"
    '<tr class="{% if run.is_valid_empty %}row-empty{% elif run.failure_type %}row-failed'
    '{% endif %}">\n'
    "{% if can_review and bulk_actions %}  <td>{% if run.actions %}"
    '<input type="checkbox" name="run" value="{{ run.pk }}" '
    'data-actions="{{ run.actions|join:" " }}" aria-label="Select run {{ run.pk }}">'
    "{% endif %}</td>\n{% endif %}"
    '  <td><a href="{{ runs_prefix }}{{ run.pk }}/">#{{ run.pk }}</a></td>\n'
    "  <td>{% run_badge run %}{% if run.partial_count %}"
    ' <span class="pill" title="partial results kept">{{ run.partial_count }} partial</span>'
    "{% endif %}</td>\n"
    '  <td>{{ run.agent|isolate }} <span class="muted">@</span> {{ run.source|isolate }}</td>\n'
    '  <td class="clip">{{ run.attempted|brief_json|isolate }}</td>\n'
    "  <td>{{ run.attempt }}</td>\n"
    "  <td>{% if run.workflow_id and run.workflow %}"
    '<a href="{{ workflows_prefix }}{{ run.workflow_id }}/">'
    "{{ run.workflow.name|clip:30|isolate }}</a>"
    '{% else %}<span class="muted">—</span>{% endif %}</td>\n'
    '  <td class="clip mono">{{ run.detail|clip:100|isolate }}</td>\n'
    '  <td class="nowrap"><time datetime="{{ run.created_at.isoformat }}">'
    '{{ run.created_at|date:"M j H:i:s" }}</time></td>\n'
    "</tr>\n"
)

REVIEW_SUMMARY = (
    "{% load dashboard %}"
    "{% failure_badge item.failure_type %}\n"
    '<a class="qid" href="{{ review_prefix }}{{ item.pk }}/">#{{ item.pk }}</a>\n'
    '<span class="qwho">{{ item.agent|isolate }} <span class="muted">@</span> '
    "{{ item.source|isolate }}</span>\n"
    '<span class="qreason">{{ item.reason|first_line|clip:140|isolate }}</span>\n'
    "{% if item.group_size > 1 %}"
    '<a class="pill" href="{{ review_prefix }}?view=groups&amp;signature={{ item.signature }}" '
    'title="Open items with the same signature">\u00d7{{ item.group_size }} like this</a>'
    "{% endif %}\n"
    '<span class="qmeta muted small">{% if item.workflow_id %}'
    "{{ item.workflow.name|clip:40|isolate }} · {% endif %}{{ item.get_origin_display }}</span>\n"
    '<span class="qstate">{% if item.state == "resolved" %}'
    '<span class="badge st-succeeded">{{ item.get_resolution_display }}</span>'
    '{% elif item.state == "claimed" %}<span class="badge st-claimed">claimed by '
    '{% if item.mine %}you{% else %}{{ item.assignee.get_username|default:"?" }}{% endif %}'
    '</span>{% else %}<span class="badge st-open">open</span>{% endif %}'
    '{% if not item.blocking %} <span class="pill" title="The work went on on another source: '
    'nothing waits on this">work went on</span>{% endif %}</span>\n'
    '<span class="qage muted small nowrap">{% if item.state != "resolved" %}'
    "waiting {{ item.created_at|age }}{% else %}"
    'by {{ item.resolved_by.get_username|default:"the fallback" }}, {{ item.resolved_at|age }} ago'
    "{% if not item.is_built_in %} · {% if item.delivered_at %}"
    '<span title="{{ item.delivered_at|date:"c" }}">picked up by the agent '
    "({{ item.get_delivered_via_display }})</span>"
    '{% elif item.is_pickup_overdue %}<span class="pill warn">not picked up (agent gone?)</span>'
    "{% else %}not picked up yet{% endif %}{% endif %}{% endif %}</span>\n"
)

RUN_CONTEXT = {
    "can_review": True,
    "bulk_actions": True,
    "runs_prefix": "/runs/",
    "workflows_prefix": "/workflows/",
}
REVIEW_CONTEXT = {"review_prefix": "/review/"}


def _text(rng: random.Random, plain: str) -> str:
    """Mostly plain text, sometimes what a hostile or careless agent sends."""
    roll = rng.random()
    if roll < 0.1:
        return rng.choice(HOSTILE)
    if roll < 0.15:
        return f"{plain}{RLO}gnp.exe"
    return plain


def sample_runs(count: int, seed: int = 7) -> list[Any]:
    """Runs as the runs list shows them, in memory: every outcome, with or without a workflow,
    partial results or actions."""
    from orchestrator.coordination.actions import RunAction
    from orchestrator.models import FailureType, Run, Workflow

    rng = random.Random(seed)
    failures = list(FailureType.values)
    runs = []
    for pk in range(1, count + 1):
        status = rng.choice([Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.QUEUED])
        failed = status == Run.Status.FAILED
        run = Run(
            pk=pk,
            status=status,
            failure_type=rng.choice(failures) if failed else None,
            agent=_text(rng, f"agent-{pk % 7}"),
            source=_text(rng, rng.choice(["news_api", "web_search", "crm"])),
            attempted=rng.choice(
                [{"query": _text(rng, f"AI impact on film {pk}")}, {"page": pk}, "plain call"]
            ),
            attempt=rng.randint(1, 4),
            detail=_text(rng, "ReadTimeout: read timed out after 10 s " * rng.randint(0, 4)),
            partial_count=rng.choice([0, 0, 3]),
            result_count=rng.choice([0, 2]),
            created_at=NOW - timedelta(seconds=rng.randint(0, 86_400)),
        )
        if rng.random() < 0.6:
            run.workflow = Workflow(pk=pk % 50 + 1, name=_text(rng, "research AI impact " * 3))
        run.actions = [a for a in RunAction if rng.random() < 0.4]
        runs.append(run)
    return runs


def sample_items(count: int, seed: int = 7) -> list[Any]:
    """Review items as the queue shows them, in memory: open, claimed (by you or another),
    resolved (built-in, delivered, overdue, waiting), grouped or alone."""
    from django.contrib.auth import get_user_model

    from orchestrator.models import FailureType, ReviewItem, Workflow
    from orchestrator.vocabulary import Delivery, Origin

    user = get_user_model()
    rng = random.Random(seed)
    people = [user(pk=1, username="olga"), user(pk=2, username=HOSTILE[0])]
    items = []
    for pk in range(1, count + 1):
        state = rng.choice(list(ReviewItem.State.values))
        resolved = state == ReviewItem.State.RESOLVED
        item = ReviewItem(
            pk=pk,
            failure_type=rng.choice([*FailureType.values, None]),
            agent=_text(rng, f"agent-{pk % 5}"),
            source=_text(rng, "news_api"),
            reason=_text(rng, "The key expired\nRaw detail: 401"),
            signature=f"{pk % 9:032x}",
            origin=rng.choice(list(Origin)),
            state=state,
            assignee=rng.choice(people) if state == ReviewItem.State.CLAIMED else None,
            resolution=rng.choice(ReviewItem.Resolution.values) if resolved else "",
            resolved_by=rng.choice([*people, None]) if resolved else None,
            resolved_at=NOW - timedelta(minutes=rng.choice([1, 90, 4000])) if resolved else None,
            delivered_at=NOW if resolved and rng.random() < 0.3 else None,
            delivered_via=rng.choice(list(Delivery)) if resolved else "",
            created_at=NOW - timedelta(minutes=rng.randint(1, 5000)),
        )
        if rng.random() < 0.5:
            item.workflow = Workflow(pk=pk % 20 + 1, name=_text(rng, "research AI impact " * 3))
        item.group_size = rng.choice([1, 1, 4])
        item.mine = item.assignee is people[0]
        items.append(item)
    return items


def render_tags(runs: list[Any], items: list[Any]) -> tuple[list[str], list[str]]:
    """Each run's and each item's row as the pages build them (the tags)."""
    from django.template import Context

    from dashboard.templatetags.review_rows import review_summary
    from dashboard.templatetags.run_rows import run_row

    run_context, review_context = Context(RUN_CONTEXT), Context(REVIEW_CONTEXT)
    return (
        [run_row(run_context, run) for run in runs],
        [review_summary(review_context, item) for item in items],
    )


def render_templates(runs: list[Any], items: list[Any]) -> tuple[list[str], list[str]]:
    """Each row through its reference template."""
    from django.template import Context, Template

    run_row, summary = Template(RUN_ROW), Template(REVIEW_SUMMARY)
    return (
        [run_row.render(Context(RUN_CONTEXT | {"run": run})) for run in runs],
        [summary.render(Context(REVIEW_CONTEXT | {"item": item})) for item in items],
    )
