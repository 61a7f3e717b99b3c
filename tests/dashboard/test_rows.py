"""The hot rows (the runs list's and the review queue's), built by tags through format_html for
speed, equal byte for byte their plain reference templates (benchmarks/dashboard_rows.py) over
runs and items of every shape, hostile and bidirectional text included; the queue's facets and
groups escape what agents sent."""

from __future__ import annotations

import importlib.util
from datetime import timedelta
from types import SimpleNamespace

import pytest
import time_machine
from django.template import Context

from dashboard.templatetags.review_rows import queue_facets, signature_group
from tests.services import ROOT

_spec = importlib.util.spec_from_file_location(
    "dashboard_rows", ROOT / "benchmarks/dashboard_rows.py"
)
assert _spec and _spec.loader
dashboard_rows = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dashboard_rows)

SCRIPT, IMG = dashboard_rows.HOSTILE[:2]


@pytest.fixture
def frozen():
    # Ages ("waiting 3 m") read the clock: both renderings read the same instant.
    with time_machine.travel(dashboard_rows.NOW, tick=False):
        yield


def test_every_run_row_equals_its_reference_template(frozen):
    runs = dashboard_rows.sample_runs(300)
    tags, _ = dashboard_rows.render_tags(runs, [])
    templates, _ = dashboard_rows.render_templates(runs, [])
    assert tags == templates
    hostile = [row for row, run in zip(tags, runs, strict=True) if SCRIPT in run.agent]
    assert hostile and all("&lt;script&gt;" in row and "<script" not in row for row in hostile)


def test_every_review_summary_equals_its_reference_template(frozen):
    items = dashboard_rows.sample_items(300)
    _, tags = dashboard_rows.render_tags([], items)
    _, templates = dashboard_rows.render_templates([], items)
    assert tags == templates
    states = {item.state for item in items}
    assert states == {"open", "claimed", "resolved"}  # every branch of the row was compared
    assert any("picked up by the agent" in row for row in tags)
    assert any("claimed by &lt;script&gt;" in row for row in tags)


def test_the_row_without_a_workflow_or_actions_keeps_its_empty_cells(frozen):
    run = dashboard_rows.sample_runs(1)[0]
    run.workflow, run.actions = None, []
    (row,), _ = dashboard_rows.render_tags([run], [])
    assert "  <td></td>\n" in row and '<span class="muted">—</span>' in row


def test_the_queues_facets_escape_what_agents_sent():
    option = SimpleNamespace(
        href=f"?source={IMG}", selected=True, count=2, value=SCRIPT, label=SCRIPT
    )
    html = queue_facets([("source", IMG, [option]), ("agent", "Agent", [])])
    assert "<script" not in html and "<img" not in html
    assert html.count("&lt;script&gt;") == 2 and html.count("&lt;img src=x") == 3
    assert 'aria-current="true"' in html and 'data-facet="agent"' not in html
    assert queue_facets([]) == "\n"


def test_a_signature_group_escapes_what_agents_sent():
    group = SimpleNamespace(
        count=3,
        held_by_others=1,
        signature=IMG,
        failure_type="timeout",
        source=SCRIPT,
        oldest=dashboard_rows.NOW - timedelta(minutes=5),
        failure_group=7,
        item=SimpleNamespace(pk=9, reason=f"{SCRIPT}\nmore"),
    )
    context = Context({"can_review": True, "review_prefix": "/review/", "group_next": IMG})
    html = signature_group(context, group)
    assert "<script" not in html and "<img" not in html
    assert html.count("&lt;script&gt;") == 2
    assert 'hx-get="/review/9/?part=group&amp;next=&lt;img' in html
    assert "3</span> <span" in html and "items you can resolve · 1 held by others" in html
