"""The top bar's search in a real headless Chromium (Debian's), driven by Playwright: typed in the
box on any page, its results in sections, a section's "more" swapped in place, hostile agent text
shown as text. The fixtures are tests/dashboard/test_browser.py's."""

from __future__ import annotations

import re

import pytest

from .conftest import ago, make_failure, make_review, make_workflow
from .test_browser import browser, login, page, visit  # noqa: F401  (fixtures and helpers)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

HOSTILE = '<img src=x onerror="window.pwned = 3"> gateway meltdown'


def test_typing_in_the_top_bar_finds_each_kind_and_pages_a_section_in_place(page, operator):  # noqa: F811
    from playwright.sync_api import expect

    runs = [
        make_failure("server_fault", detail=f"gateway meltdown {i}", created_at=ago(minutes=40 - i))
        for i in range(12)
    ]
    make_review(run=runs[0], reason=HOSTILE)
    make_workflow(name="Gateway meltdown postmortem")
    login(page, "olga", "operator-pass-123", then="/workflows/")
    box = page.locator("header.topbar input[name=q]")
    box.fill("gateway meltdown")
    box.press("Enter")
    page.wait_for_load_state("networkidle")
    expect(page).to_have_url(re.compile(r"/search/\?q=gateway\+meltdown"))
    expect(box).to_have_value("gateway meltdown")
    run_hits = page.locator("#search-runs li.hit")
    expect(run_hits).to_have_count(10)
    expect(page.locator("#search-reviews li.hit")).to_have_count(1)
    expect(page.locator("#search-workflows li.hit")).to_have_text(re.compile("postmortem"))
    # The hostile reason is text on the page, not an element, and ran nothing.
    expect(page.locator("#search-reviews li.hit")).to_contain_text('<img src=x onerror="')
    assert page.locator("#search-reviews img").count() == 0
    assert page.evaluate("window.pwned") is None

    page.evaluate("window.__marker = 'same page'")
    page.click("#search-runs a[rel=next]")
    expect(run_hits).to_have_count(2)
    expect(page).to_have_url(re.compile(r"runs="))
    assert page.evaluate("window.__marker") == "same page"  # the section alone was swapped
    expect(page.locator("#search-workflows li.hit")).to_have_count(1)
    expect(run_hits.first).to_contain_text(f"Run #{runs[1].pk}")
    page.watcher.assert_clean()


def test_a_kind_and_an_id_typed_in_the_box_open_its_page(page, operator):  # noqa: F811
    run = make_failure(detail="one failure")
    login(page, "olga", "operator-pass-123")
    box = page.locator("header.topbar input[name=q]")
    box.fill(f"run {run.pk}")
    box.press("Enter")
    page.wait_for_load_state("networkidle")
    assert page.url.endswith(f"/runs/{run.pk}/")
    page.watcher.assert_clean()
