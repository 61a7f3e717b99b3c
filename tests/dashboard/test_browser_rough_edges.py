"""What a new operator tripped over, in a real headless Chromium (fixtures from test_browser):
choosing "retry with edited input" opens the input to edit, and the API docs list their
operations within a second of a returning visit (two on a first one), without a CSP violation."""

from __future__ import annotations

import pytest

from orchestrator.models import ReviewItem

from .conftest import make_failure, make_review
from .test_browser import browser, login, page  # noqa: F401  (fixtures)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def test_choosing_retry_with_edited_input_opens_the_input(page, operator):  # noqa: F811
    from playwright.sync_api import expect

    run = make_failure("invalid_input", attempted={"query": "AI film", "limit": 500})
    item = make_review(run)
    login(page, "olga", "operator-pass-123", then=f"/review/{item.pk}/")
    page.locator("button", has_text="Claim").click()
    # The form is there before the claim too: wait for the claim's answer to replace the card.
    expect(page.locator("article.review")).to_contain_text("Claimed: it is yours")
    edited = page.locator("details.edited")
    expect(edited).not_to_have_attribute("open", "")
    page.locator("input[name=resolution][value=retry]").check()
    expect(edited).not_to_have_attribute("open", "")  # only the edited retry needs it
    page.locator("input[name=resolution][value=retry_edited]").check()
    expect(edited).to_have_attribute("open", "")
    textarea = edited.locator("textarea[name=edited_input]")
    expect(textarea).to_be_visible()
    textarea.fill('{"query": "AI film", "limit": 50}')
    page.locator("textarea[name=note]").fill("a smaller page of results")
    page.locator("button", has_text="Resolve").click()
    expect(page.locator("article.review")).to_contain_text("Resolved")
    item.refresh_from_db()
    assert (item.state, item.resolution) == (ReviewItem.State.RESOLVED, "retry_edited")
    assert item.edited_input == {"query": "AI film", "limit": 50}
    page.watcher.assert_clean()


def test_the_api_docs_list_their_operations_first_time_and_again(browser, live_server):  # noqa: F811
    # How fast they do is benchmarks/docs_page.py's figure (a timed test would measure the
    # machine's load); here: a cold and two warm visits each list the operations, and the page's
    # content security policy refuses nothing it loads.
    context = browser.new_context(base_url=live_server.url)
    tab = context.new_page()
    refused: list[str] = []
    tab.on("console", lambda m: refused.append(m.text))
    for _ in range(3):
        tab.goto("/api/v1/docs")
        tab.wait_for_selector(".opblock-tag", timeout=30_000)
        assert tab.locator(".opblock").count() > 10
        tab.goto("about:blank")
    context.close()
    assert not [m for m in refused if m.startswith("Refused to")], refused


def test_the_api_docs_authorize_and_try_an_operation(browser, live_server):  # noqa: F811
    # The docs page stores the bearer scheme as it is (static/js/api-docs.js) instead of waiting
    # for swagger-client to rebuild the document: the Authorize dialog must still know it, and
    # the token given there must ride on a request tried from the page.
    from playwright.sync_api import expect

    from orchestrator.models import ApiToken

    _, secret = ApiToken.issue("docs-browser")
    context = browser.new_context(base_url=live_server.url)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    sent: list[str | None] = []
    tab.on(
        "request",
        lambda r: sent.append(r.headers.get("authorization")) if "/api/v1/runs?" in r.url else None,
    )
    tab.goto("/api/v1/docs")
    tab.get_by_role("link", name="Try calls out in Swagger UI").click()
    tab.wait_for_selector(".opblock-tag", timeout=15_000)
    tab.locator("button.authorize").first.click()
    dialog = tab.locator(".auth-container").first
    expect(dialog).to_contain_text("BearerToken")
    expect(dialog).to_contain_text("http, Bearer")
    dialog.locator("input").fill(secret)
    dialog.locator("button.authorize").click()
    expect(dialog).to_contain_text("Authorized")
    tab.locator(".dialog-ux button.close-modal").click()
    operation = tab.locator("#operations-runs-orchestrator_api_runs_list_runs")
    operation.locator(".opblock-summary").click()
    operation.locator("button.try-out__btn").click(timeout=30_000)
    operation.locator("button.execute").click()
    answer = operation.locator(".live-responses-table tbody .response-col_status").first
    expect(answer).to_contain_text("200", timeout=30_000)
    context.close()
    assert sent and sent[-1] == f"Bearer {secret}", sent
    assert not errors, errors
