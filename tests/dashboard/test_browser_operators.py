"""Operators at volume, in a real headless Chromium (Debian's), driven by Playwright: the review
queue with 300 open items (a deep link, a filter, resolving a group, the keyboard and its focus
ring), failure groups, agent text that cannot reorder the page, and an expired session.

The fixtures (one browser per test, a page watched for CSP violations, dialogs and errors) are
tests/dashboard/test_browser.py's.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from insights import groups
from insights.models import FailureGroup
from orchestrator.models import ReviewItem, Run

from .conftest import make_failure, make_review, make_workflow
from .test_browser import browser, login, page, visit  # noqa: F401  (fixtures and helpers)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

FAILURE_TYPES = ["timeout", "rate_limited", "auth_failure", "server_fault", "unclassified"]
SOURCES = ["news_api", "news_wire", "web_search", "scholar_api"]


def three_hundred_items() -> list[ReviewItem]:
    """300 open escalations, oldest first: 5 failure types by 4 sources, 20 signatures."""
    now = timezone.now()
    wf = make_workflow(name="weekly digest", capability="news")
    runs = Run.objects.bulk_create(
        Run(
            agent=f"agent-{i % 3}",
            source=SOURCES[i % 4],
            workflow=wf if i % 2 else None,
            status=Run.Status.ESCALATED,
            failure_type=FAILURE_TYPES[i % 5],
            detail=f"{FAILURE_TYPES[i % 5]} from {SOURCES[i % 4]} (request {i})",
            decision="escalate",
            created_at=now - timedelta(minutes=600 - i),
        )
        for i in range(300)
    )
    return [
        make_review(
            run,
            reason=f"{run.failure_type} needs a human",
            signature=f"{run.source}|{run.failure_type}",
            created_at=run.created_at,
        )
        for run in runs
    ]


# ---------------------------------------------------------------------------------------------
# The review queue at 300 items


def test_a_deep_link_opens_the_item_wherever_it_is_in_the_queue(page, operator):  # noqa: F811
    from playwright.sync_api import expect

    items = three_hundred_items()
    deep = items[250]  # far beyond the first page of 50
    login(page, "olga", "operator-pass-123", then=f"/runs/{deep.run_id}/")
    page.click(f"text=Review #{deep.pk}")
    page.wait_for_load_state("networkidle")
    assert page.url.endswith(f"/review/{deep.pk}/")
    card = page.locator(f"#card-{deep.pk}")
    expect(card).to_contain_text("needs a human")
    card.locator("button", has_text="Claim").click()
    expect(card.locator('input[name="resolution"]').first).to_be_visible()
    expect(page.locator(f"#sum-{deep.pk}")).to_contain_text("claimed by you")
    assert ReviewItem.objects.get(pk=deep.pk).state == "claimed"
    page.watcher.assert_clean()


def test_a_facet_filters_the_queue_with_its_count(page, operator):  # noqa: F811
    from playwright.sync_api import expect

    three_hundred_items()
    login(page, "olga", "operator-pass-123", then="/review/")
    expect(page.locator("#queue-count")).to_contain_text("300 of 300")
    rows = page.locator("ol.queue > li.qrow")
    expect(rows).to_have_count(50)
    option = page.locator('[data-facet="failure_type"] a[data-value="auth_failure"]')
    expect(option.locator("b")).to_have_text("60")
    page.evaluate("window.__marker = 'same page'")
    option.click()
    expect(page).to_have_url(re.compile(r"failure_type=auth_failure"))
    expect(page.locator("#queue-count")).to_contain_text("60 of 300")
    expect(rows).to_have_count(50)
    assert set(rows.locator(".badge.ft").all_inner_texts()) == {"auth failure"}
    assert page.evaluate("window.__marker") == "same page"  # swapped in place by htmx
    source = page.locator('[data-facet="source"] a[data-value="web_search"]')
    expect(source.locator("b")).to_have_text("15")  # counted with the failure type applied
    source.click()
    expect(page.locator("#queue-count")).to_contain_text("15 of 300")
    expect(rows).to_have_count(15)
    page.go_back()
    expect(page.locator("#queue-count")).to_contain_text("60 of 300")
    page.watcher.assert_clean()


def test_resolving_a_whole_group_like_this(page, operator):  # noqa: F811
    from playwright.sync_api import expect

    three_hundred_items()
    login(page, "olga", "operator-pass-123", then="/review/?view=groups")
    group = page.locator('li.sig-group[data-signature="news_api|timeout"]')
    expect(group).to_contain_text("15")
    group.locator("summary", has_text="Resolve all like this").click()  # loads the form
    expect(group.locator("legend")).to_have_text("Resolution for all 15")
    group.locator('input[value="abort"]').check()
    group.locator("textarea[name=note]").fill("the news API retired this index")
    group.locator("button", has_text="Resolve all 15 like this").click()
    page.wait_for_load_state("networkidle")
    expect(page.locator(".messages")).to_contain_text("and 14 more with the same signature")
    resolved = ReviewItem.objects.filter(signature="news_api|timeout", state="resolved")
    assert resolved.count() == 15
    assert set(resolved.values_list("resolution", "note").distinct()) == {
        ("abort", "the news API retired this index")
    }
    assert ReviewItem.objects.open().count() == 285
    expect(page.locator('li.sig-group[data-signature="news_api|timeout"]')).to_have_count(0)
    page.watcher.assert_clean()


def _luminance(css: str) -> float:
    r, g, b = (int(v) / 255 for v in re.findall(r"[\d.]+", css)[:3])
    lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (r, g, b)]
    return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]


def contrast(a: str, b: str) -> float:
    """The WCAG contrast ratio of two computed CSS colours (rgb(…))."""
    la, lb = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def test_the_keyboard_moves_claims_and_resolves_with_a_visible_ring(page, operator):  # noqa: F811
    from playwright.sync_api import expect

    items = three_hundred_items()
    login(page, "olga", "operator-pass-123", then="/review/")
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("k")
    focused = page.evaluate("document.activeElement.id")
    assert focused == f"sum-{items[1].pk}"  # down three, up one: the second row
    ring = page.evaluate(
        """() => {
          const s = document.activeElement, row = s.closest('ol.queue');
          const st = getComputedStyle(s);
          return {style: st.outlineStyle, width: parseFloat(st.outlineWidth),
                  color: st.outlineColor, inside: st.backgroundColor,
                  outside: getComputedStyle(row).backgroundColor,
                  page: getComputedStyle(document.body).backgroundColor};
        }"""
    )
    assert ring["style"] == "solid" and ring["width"] >= 2
    for around in (ring["inside"], ring["outside"], ring["page"]):
        assert contrast(ring["color"], around) >= 3, ring
    page.keyboard.press("c")
    row = page.locator(f"#review-{items[1].pk}")
    expect(row.locator(f"#card-{items[1].pk}")).to_contain_text("Claimed: it is yours")
    expect(page.locator(f"#sum-{items[1].pk}")).to_contain_text("claimed by you")
    assert ReviewItem.objects.get(pk=items[1].pk).assignee == operator
    page.keyboard.press("r")  # its resolution form, first choice focused
    expect(row.locator('input[name="resolution"][value="retry"]')).to_be_focused()
    page.keyboard.press("Space")
    row.locator("textarea[name=note]").fill("provider is back")
    row.locator("button", has_text="Resolve").click()
    expect(row).to_contain_text("Resolved (retry)")
    item = ReviewItem.objects.get(pk=items[1].pk)
    assert (item.state, item.resolution, item.note) == ("resolved", "retry", "provider is back")
    # r on an unclaimed row goes straight to its resolution: resolving claims it, no claim first.
    page.locator(f"#sum-{items[2].pk}").focus()
    page.keyboard.press("r")
    expect(page.locator(f"#review-{items[2].pk} input[name=resolution]").first).to_be_focused()
    assert ReviewItem.objects.get(pk=items[2].pk).state == "open"
    page.watcher.assert_clean()


# ---------------------------------------------------------------------------------------------
# Failure groups


def test_failure_groups_from_a_tile_to_a_group_and_back_as_a_regression(page, operator):  # noqa: F811
    from playwright.sync_api import expect

    for n in range(6):
        make_failure("timeout", source="news_api", detail=f"ReadTimeout after {n} s")
    make_failure("auth_failure", source="web_search", detail="401 key expired")
    groups.fold()
    login(page, "olga", "operator-pass-123")
    page.click('[data-tile="ft-timeout"] [data-groups]')
    page.wait_for_load_state("networkidle")
    assert "failure_type=timeout" in page.url and "range=24h" in page.url
    rows = page.locator("#groups-table tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("readtimeout after <num> s")
    rows.first.locator("a").first.click()
    page.wait_for_load_state("networkidle")
    expect(page.locator("h2").first).to_have_text("6 failures")
    expect(page.locator("#group-runs li")).to_have_count(6)
    page.locator("button", has_text="Resolve").click()
    page.wait_for_load_state("networkidle")
    expect(page.locator(".messages")).to_contain_text("Group marked resolved")
    group = FailureGroup.objects.get(source="news_api")
    assert group.state == "resolved"
    make_failure("timeout", source="news_api", detail="ReadTimeout after 9 s")
    groups.fold()
    page.reload()
    expect(page.locator("h1")).to_contain_text("regression")
    page.watcher.assert_clean()


# ---------------------------------------------------------------------------------------------
# Agent text isolated


MEASURE = """(sel) => {
  const root = document.querySelector(sel);
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const at = (node, k) => {
    const r = document.createRange();
    r.setStart(node, k); r.setEnd(node, k + 1);
    return r.getBoundingClientRect().left;
  };
  let node, out = {};
  while ((node = walker.nextNode())) {
    const i = node.data.indexOf('attempt 1');
    if (i >= 0) { out.a = at(node, i); out.one = at(node, i + 8); }
    const t = node.data.search(/\\d\\d:\\d\\d:\\d\\d/);
    if (t >= 0) { out.first = at(node, t); out.last = at(node, t + 7); }
  }
  const bdi = root.querySelector('bdi:nth-of-type(2)');
  if (bdi) out.sourceEnd = bdi.getBoundingClientRect().right;
  return out;
}"""


def test_a_direction_override_in_agent_text_moves_nothing_around_it(page, operator):  # noqa: F811
    from playwright.sync_api import expect

    run = make_failure(
        "timeout", source="news\u202eapi", detail="file\u202egnp.exe", agent="researcher"
    )
    wf = make_workflow(coverage={"film": {"verdict": "thin", "why": "one source"}})
    login(page, "olga", "operator-pass-123", then=f"/runs/{run.pk}/")
    where = page.evaluate(MEASURE, "#run-line")
    assert where["a"] < where["one"], where  # "attempt 1", not "1 tpmetta"
    assert where["first"] < where["last"], where  # 12:39:22, not 22:93:21
    assert where["sourceEnd"] <= where["a"], where  # the source stays before "attempt"
    # The same text without isolation does reorder: the measurement would see it.
    page.evaluate(
        """() => { const p = document.createElement('p'); p.id = 'bare';
           p.textContent = 'researcher @ news\\u202eapi · attempt 1 · 12:39:22';
           document.querySelector('main').append(p); }"""
    )
    bare = page.evaluate(MEASURE, "#bare")
    assert bare["a"] > bare["one"] and bare["first"] > bare["last"], bare
    expect(page.locator("code.as-written")).to_have_text("file\\u202egnp.exe")
    # A coverage badge carries no coloured left border (it read as a stray "(").
    visit(page, f"/workflows/{wf.pk}/")
    border = page.evaluate(
        "getComputedStyle(document.querySelector('.badge.verdict')).borderLeftColor"
    )
    assert border == "rgba(0, 0, 0, 0)"
    page.watcher.assert_clean()


# ---------------------------------------------------------------------------------------------
# An expired session


def test_an_expired_session_loads_the_login_page_instead_of_swapping_it_in(
    page,  # noqa: F811
    operator,
    settings,
):
    settings.DASHBOARD_POLL_SECONDS = 0.5
    login(page, "olga", "operator-pass-123", then="/?window=7d")
    assert page.locator("#tiles").count() == 1
    # The server no longer knows the session (expired, or signed out elsewhere).
    page.context.add_cookies(
        [{"name": "sessionid", "value": "expired", "url": page.url.split("?")[0]}]
    )
    page.wait_for_url(re.compile(r"/accounts/login/\?next="), timeout=10_000)
    assert page.url.endswith("/accounts/login/?next=/%3Fwindow%3D7d")
    assert page.locator("#tiles").count() == 0  # a page of its own, not a fragment
    assert page.locator("form.who").count() == 0  # and no "Sign out" header
    page.fill("#id_username", "olga")
    page.fill("#id_password", "operator-pass-123")
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/\?window=7d$"))
    page.watcher.assert_clean()
