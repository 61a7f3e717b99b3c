"""The policy dry run on the edit form in a real headless Chromium, and the analytics pages free
of Content-Security-Policy violations (fixtures from test_browser)."""

from __future__ import annotations

import pytest

from orchestrator.models import RoutingPolicy

from .conftest import make_failure, make_run
from .test_browser import browser, login, page, visit  # noqa: F401  (fixtures)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def test_the_edit_form_shows_the_dry_run_before_saving(page, policy_editor):  # noqa: F811
    from playwright.sync_api import expect

    policy = RoutingPolicy.objects.get(failure_type="timeout")
    attempts = policy.max_attempts
    first = make_failure("timeout", decision="retry")
    make_run(retry_of=first, attempt=2)
    for _ in range(3):
        make_failure("timeout", decision="retry")
    login(page, "paul", "editor-pass-123", then="/policies/")
    page.locator(f"#policy-{policy.pk}").locator("a", has_text="Edit").click()
    form_row = page.locator(f"#policy-{policy.pk}.editing")
    form_row.locator("input[name=max_attempts]").fill("1")
    form_row.locator("select[name=action_when_exhausted]").select_option("escalate")
    form_row.locator("button", has_text="Dry run").click()
    result = page.locator(f"#dry-run-{policy.pk}")
    expect(result).to_contain_text("Dry run over 4 failures of the last 7 days")
    expect(result.locator("tr", has_text="Escalations").first).to_contain_text("+4")
    expect(result.locator("tr", has_text="Retries").first).to_contain_text("-4")
    # Still the form, nothing saved: Save is one click away.
    expect(form_row.locator("button", has_text="Save")).to_be_visible()
    policy.refresh_from_db()
    assert policy.max_attempts == attempts
    page.watcher.assert_clean()


def test_the_analytics_pages_are_free_of_csp_violations(page, policy_editor):  # noqa: F811
    login(page, "paul", "editor-pass-123")
    for path in ("/slos/", "/efficacy/", "/retry-audit/", "/policies/#versions"):
        visit(page, path)
