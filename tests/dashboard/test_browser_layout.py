"""Page layouts a new operator found broken, measured in a real headless Chromium (fixtures from
test_browser): the Resolved tab uses the page's width and keeps each row's text inside its row, the
top bar is one line at 1400 px, and review rows are one even line each."""

from __future__ import annotations

import pytest
from django.utils import timezone

from orchestrator.models import ReviewItem

from .conftest import make_failure, make_review
from .test_browser import browser, login, page  # noqa: F401  (fixtures)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

WIDTHS = (1024, 1400, 1920)
# Per row: how far (px) its children reach past the row's right edge, and the list's width
# against the queue's.
MEASURE = """() => {
  const queue = document.querySelector('#queue').getBoundingClientRect();
  const list = document.querySelector('ol.queue').getBoundingClientRect();
  let spill = 0;
  for (const row of document.querySelectorAll('ol.queue > li.qrow')) {
    const edge = row.getBoundingClientRect().right;
    for (const el of row.querySelectorAll('summary *')) {
      spill = Math.max(spill, el.getBoundingClientRect().right - edge);
    }
  }
  return {queue: queue.width, list: list.width, spill};
}"""


def _resolved_agent_items(count: int) -> None:
    now = timezone.now()
    for n in range(count):
        run = make_failure(
            "auth_failure",
            agent=f"crm-agent-{n}",
            source="crm_api",
            detail="the stored API key was revoked by the provider last night",
        )
        make_review(
            run,
            origin="agent",
            reason="An expired or revoked credential: a human must rotate the key and say so",
            state=ReviewItem.State.RESOLVED,
            resolution="abort",
            resolved_at=now,
            delivered_at=now,
            delivered_via="ack",
        )


def test_the_resolved_tab_uses_the_page_width_and_keeps_rows_in_their_card(
    page,  # noqa: F811
    operator,
):
    _resolved_agent_items(3)
    login(page, "olga", "operator-pass-123", then="/review/?state=resolved")
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto("/review/?state=resolved")
        figures = page.evaluate(MEASURE)
        assert "picked up by the agent (ack)" in page.locator("ol.queue").inner_text()
        # No filter column on this tab: the list takes the queue's whole width.
        assert figures["list"] >= figures["queue"] - 1, (width, figures)
        assert figures["spill"] <= 0.5, (width, figures)
    page.watcher.assert_clean()


# Per element of the top bar: its vertical middle; the bar is one line when they all share it.
TOPBAR = """() => {
  const middles = [...document.querySelectorAll('.mainnav > a, .topbar > *')].map((el) => {
    const box = el.getBoundingClientRect();
    return Math.round(box.top + box.height / 2);
  });
  return {middles, height: document.querySelector('.topbar').getBoundingClientRect().height};
}"""


def test_the_navigation_fits_one_line_at_1400_px(page, django_user_model):  # noqa: F811
    django_user_model.objects.create_superuser("ada", "ada@example.org", "admin-pass-123")
    make_review()  # the Review link with its count
    login(page, "ada", "admin-pass-123", then="/")
    for width in (1400, 1920):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto("/policies/")
        bar = page.evaluate(TOPBAR)
        assert max(bar["middles"]) - min(bar["middles"]) <= 3, (width, bar)
    page.watcher.assert_clean()


ROW_HEIGHTS = """() => [...document.querySelectorAll('ol.queue > li.qrow > details > summary')]
  .map((el) => Math.round(el.getBoundingClientRect().height))"""


def test_open_review_rows_are_one_even_line_each(page, operator):  # noqa: F811
    # Short and long agents, sources, reasons and workflow names: each row keeps one line.
    for n, (agent, source, reason) in enumerate(
        [
            ("a", "s", "short"),
            ("researcher-with-a-long-name", "scholarly_search_api_v2", "x " * 120),
            ("crm-agent", "crm_api", "An expired or revoked credential: rotate the key"),
        ]
    ):
        run = make_failure("auth_failure" if n else "unclassified", agent=agent, source=source)
        make_review(run, reason=reason)
    login(page, "olga", "operator-pass-123", then="/review/")
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        page.goto("/review/")
        heights = page.evaluate(ROW_HEIGHTS)
        assert len(heights) == 3 and len(set(heights)) == 1, (width, heights)
    page.watcher.assert_clean()
