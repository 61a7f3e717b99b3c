"""The dashboard in a real headless Chromium (Debian's), driven by Playwright against live_server.

Each page also checks the console for Content-Security-Policy violations: one would mean an htmx
feature (or a stray inline script/style) broke under our policy.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from orchestrator.models import ApiToken, RoutingPolicy

from ..conftest import require_service
from .conftest import HOSTILE_IMG, make_failure, make_review, make_run

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

# Playwright's sync API runs an event loop in this thread; Django then refuses ORM calls from it
# unless told that this (test-only) mix is intended.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
HOSTILE_SCRIPT = "<script>window.pwned = 1; alert('script ran')</script>"
HOSTILE_IMG_RUNS = '<img src=x onerror="window.pwned = 2; alert(1)">'
# Records violations from inside the page too (console wording varies between versions).
CSP_PROBE = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__csp.push(e.violatedDirective + ' ' + (e.blockedURI || 'inline'));
});
"""

pytestmark = [
    pytest.mark.slow,
    # live_server needs committed data; serialized_rollback restores the seeded groups/policies.
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


@pytest.fixture
def browser(transactional_db):
    """One browser per test, started after the database is set up and stopped before teardown.

    Playwright's sync API keeps an event loop running in this thread while it is started; Django's
    connection handling then differs (asgiref locals), and the serialized-rollback restore of the
    seeded groups between transactional tests silently loads nothing.
    """
    with chromium() as started:
        yield started


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium under Playwright; missing, the test skips here and fails in CI."""
    require_service(CHROMIUM.exists(), "Debian's chromium (/usr/bin/chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        started = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield started
        finally:
            started.close()


class Watcher:
    def __init__(self, page):
        self.page = page
        self.console: list[str] = []
        self.console_errors: list[str] = []
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("dialog", self._dialog)

    def _console(self, message):
        self.console.append(message.text)
        if message.type == "error":
            self.console_errors.append(f"{message.text} ({message.location.get('url', '')})")

    def _dialog(self, dialog):
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def assert_clean(self, no_console_error: bool = False):
        # "Refused to …" is Chrome's wording for a blocked script, style, frame or connection.
        violations = [m for m in self.console if m.startswith("Refused to")]
        violations += self.page.evaluate("window.__csp || []")
        assert violations == [], violations
        assert self.dialogs == [], self.dialogs
        assert self.errors == [], self.errors
        if no_console_error:  # a failed load, an htmx error, a script's console.error
            assert self.console_errors == [], self.console_errors


@pytest.fixture
def page(browser, live_server):
    with open_tab(browser, live_server.url) as tab:
        yield tab


@contextlib.contextmanager
def open_tab(browser: Browser, base_url: str, timeout: float = 10) -> Iterator[Page]:
    """A tab of its own context on `base_url`, its console and CSP watched (`tab.watcher`)."""
    context = browser.new_context(base_url=base_url)
    context.add_init_script(CSP_PROBE)
    context.set_default_timeout(timeout * 1000)
    tab = context.new_page()
    tab.watcher = Watcher(tab)
    try:
        yield tab
    finally:
        context.close()


def login(page, username: str, password: str, then: str = "/") -> None:
    page.goto(then)
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")


def visit(page, path: str) -> None:
    page.goto(path)
    page.wait_for_load_state("networkidle")
    page.watcher.assert_clean()


def test_login_lands_on_the_overview(page, operator):
    page.goto("/")
    assert "/accounts/login/" in page.url
    page.watcher.assert_clean()
    login(page, "olga", "operator-pass-123")
    assert page.url.rstrip("/").endswith(page.url.split("/")[2])  # the site root
    assert page.locator("h1").first.inner_text() == "Overview"
    page.watcher.assert_clean()


def test_tiles_refresh_without_reloading(page, operator, settings):
    from playwright.sync_api import expect

    # Fast polls only where a poll is the point: on SQLite the live server shares one test
    # connection between its request threads, so fewer concurrent requests is safer.
    settings.DASHBOARD_POLL_SECONDS = 0.5

    _, secret = ApiToken.issue("browser-test-agent")
    login(page, "olga", "operator-pass-123")
    tile = page.locator('[data-tile="ft-timeout"] [data-value]')
    expect(tile).to_have_text("0")
    page.evaluate("window.__marker = 'same page'")
    # An agent reports a failure through the API (the server thread writes it: the test thread
    # stays off the shared SQLite test connection while the page polls).
    reported = page.request.post(
        "/api/v1/runs",
        headers={"Authorization": f"Bearer {secret}"},
        data={
            "status": "error",
            "failure_type": "timeout",
            "agent": "a1",
            "source": "news_api",
            "detail": "ReadTimeout",
        },
    )
    assert reported.status == 201, reported.text()
    expect(tile).to_have_text("1")
    assert page.evaluate("window.__marker") == "same page"  # refreshed in place, no reload
    page.watcher.assert_clean()


def test_drilling_from_a_tile_to_a_run(page, operator):
    run = make_failure("auth_failure", detail="401 Unauthorized from news_api")
    make_run()
    login(page, "olga", "operator-pass-123")
    page.click('[data-tile="ft-auth_failure"]')
    page.wait_for_load_state("networkidle")
    assert "failure_type=auth_failure" in page.url
    rows = page.locator("table.runs tbody tr")
    assert rows.count() == 1
    page.click(f"text=#{run.pk}")
    page.wait_for_load_state("networkidle")
    assert page.url.endswith(f"/runs/{run.pk}/")
    assert page.locator("pre.detail").inner_text() == "401 Unauthorized from news_api"
    page.watcher.assert_clean()


def test_filtering_the_runs_updates_the_table_and_the_url(page, operator):
    from playwright.sync_api import expect

    make_failure("timeout", source="news_api")
    make_failure("server_fault", source="web_search")
    make_run(source="web_search")
    login(page, "olga", "operator-pass-123", then="/runs/")
    page.evaluate("window.__marker = 'same page'")
    rows = page.locator("table.runs tbody tr")
    expect(rows).to_have_count(3)
    page.select_option("select[name=failure_type]", "server_fault")
    expect(rows).to_have_count(1)
    expect(page).to_have_url(re.compile(r"failure_type=server_fault"))
    assert page.evaluate("window.__marker") == "same page"  # an htmx swap, not a reload
    search = page.locator("form.filters input[name=q]")  # not the top bar's search box
    search.fill("nothing matches this")
    search.press("Enter")
    expect(page.locator("text=No runs match these filters")).to_be_visible()
    expect(page).to_have_url(re.compile(r"q=nothing"))  # pushed after the swap settles
    # One history entry per filter change (a typed search must not also fire "change").
    page.wait_for_function("!document.querySelector('.htmx-request, .htmx-settling')")
    page.wait_for_timeout(300)
    assert page.evaluate("history.length") == 5  # blank tab, login, runs, type filter, search
    page.go_back()
    expect(page).to_have_url(re.compile(r"failure_type=server_fault$"))
    expect(rows).to_have_count(1)
    page.watcher.assert_clean()


def test_a_full_page_of_runs_fills_in_its_total_once_shown(page, operator):
    from playwright.sync_api import expect

    from dashboard.filters import PAGE_SIZE

    for i in range(PAGE_SIZE + 3):
        make_run(source="web_search" if i % 2 else "news_api")
    login(page, "olga", "operator-pass-123", then="/runs/")
    total = page.locator("#runs-total")
    expect(total).to_contain_text(f"{PAGE_SIZE + 3} runs match")  # asked for after the list
    page.fill("input[name=source]", "news")
    page.press("input[name=source]", "Enter")
    expect(total).to_contain_text(f"{(PAGE_SIZE + 3) // 2 + 1} runs match")  # on one page
    page.watcher.assert_clean()


def test_resolving_a_review_item(page, operator):
    from playwright.sync_api import expect

    item = make_review(make_failure("unclassified", detail="mystery error"))
    login(page, "olga", "operator-pass-123", then="/review/")
    card = page.locator(f"#review-{item.pk}")
    card.locator("summary").click()  # a compact row opens with the item in full
    expect(card).to_contain_text("mystery error")
    card.locator("button", has_text="Claim").click()
    # The form is there before the claim too: wait for the claim's answer to replace the card.
    expect(card).to_contain_text("Claimed: it is yours")
    expect(card.locator("input[name=resolution]").first).to_be_visible()
    card.locator("input[name=resolution][value=abort]").check()
    card.locator("textarea[name=note]").fill("the source is gone for good")
    card.locator("button", has_text="Resolve").click()
    expect(page.locator(f"#review-{item.pk}")).to_contain_text("Resolved")
    item.refresh_from_db()
    assert (item.state, item.resolution, item.note) == (
        "resolved",
        "abort",
        "the source is gone for good",
    )
    page.watcher.assert_clean()


def test_editing_a_policy_in_place(page, policy_editor):
    from playwright.sync_api import expect

    policy = RoutingPolicy.objects.get(failure_type="timeout")
    login(page, "paul", "editor-pass-123", then="/policies/")
    row = page.locator(f"#policy-{policy.pk}")
    row.locator("a", has_text="Edit").click()
    form_row = page.locator(f"#policy-{policy.pk}.editing")
    expect(form_row).to_be_visible()
    form_row.locator("input[name=base_delay]").fill("100")
    form_row.locator("button", has_text="Save").click()
    expect(form_row).to_contain_text("The maximum delay must be ≥ the base delay.")
    form_row.locator("input[name=base_delay]").fill("2")
    form_row.locator("input[name=max_attempts]").fill("5")
    form_row.locator("input[name=note]").fill("slow provider week")
    form_row.locator("button", has_text="Save").click()
    expect(page.locator(f"#policy-{policy.pk}:not(.editing) td").nth(1)).to_have_text("5")
    expect(page.locator("#history")).to_contain_text("slow provider week")
    policy.refresh_from_db()
    assert policy.max_attempts == 5
    page.watcher.assert_clean()


def test_hostile_agent_content_stays_text(page, operator):
    from playwright.sync_api import expect

    run = make_failure(
        "unclassified",
        detail=HOSTILE_SCRIPT + " " + HOSTILE_IMG_RUNS,
        attempted={"query": HOSTILE_IMG},
        alternatives=[HOSTILE_SCRIPT],
        partial_results=[{"excerpt": HOSTILE_IMG_RUNS}],
        source='<img src=x onerror="window.pwned=3">',
    )
    make_review(run)
    login(page, "olga", "operator-pass-123")
    for path in (f"/runs/{run.pk}/", "/runs/", "/review/", "/runs/?q=pwned", "/"):
        visit(page, path)
        assert page.evaluate("window.pwned") is None, path
    page.goto(f"/runs/{run.pk}/")
    expect(page.locator("pre.detail")).to_contain_text("<script>window.pwned = 1;")
    assert page.locator("main img").count() == 0
    page.watcher.assert_clean()


def test_every_page_is_free_of_csp_violations(page, policy_editor, settings):
    run = make_failure("timeout")
    item = make_review(run)
    login(page, "paul", "editor-pass-123")
    for path in (
        "/",
        "/?window=1h",
        "/?window=7d",
        "/runs/",
        "/runs/retrying/",
        f"/runs/{run.pk}/",
        "/workflows/",
        "/review/",
        "/review/?show=resolved",
        "/review/?view=groups",
        f"/review/{item.pk}/",
        "/groups/",
        "/policies/",
        f"/review/#review-{item.pk}",
    ):
        visit(page, path)
    settings.DASHBOARD_POLL_SECONDS = 0.5
    page.goto("/")
    page.wait_for_timeout(1500)  # a few polls of the tiles, each swap checked by the CSP probe
    page.watcher.assert_clean()
