"""A newcomer's first visit to a running `make run`, in a real Chromium, through the UI only.

The main job runs as `make run` starts it (test_main_job's `launch`: the embedded defaults in a
temporary folder, a real worker, the provider, the web server and the external agent `crm-agent`),
tuned to settle fast and then hold still: the tour only (`--every 0`) and one job of the agent, so
a tile's number and its runs list can be compared. The database is read only to wait until the job
has produced what a step needs; every step is clicks, forms and what the pages show, except the
first visit and /metrics, which no page links to. No console error, no CSP violation throughout.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import Page, expect

from ..dashboard.test_browser import chromium, login, open_tab
from .test_main_job import Banner, Launch, finish, launch

# The bounds below add up to about 6 minutes when everything is late; it takes under one.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

LAUNCH_ARGS = ("--every", "0", "--seed", "1")
AGENT_EVERY = "3600"  # the agent's first job (a stale key, escalated) and no other
STARTED = 120  # seconds until the banner (migrations on a busy machine)
PRODUCED = 90  # seconds from the banner until the job produced all that the journey needs
ACTED = 45  # seconds for the coordinator or the agent to act on a resolution


@dataclass
class Journey:
    banner: Banner
    switched: sqlite3.Row  # a run started in place of another: id, source, replaced, …
    built_in: int  # an open review item of the built-in coordinator
    agents: int  # an open review item of crm-agent, the external agent


@pytest.fixture
def browser():
    """Started first: a missing Chromium skips (fails in CI) before the job is launched."""
    with chromium() as started:
        yield started


@pytest.fixture
def job(browser, tmp_path) -> Iterator[Launch]:
    handle = launch(tmp_path, *LAUNCH_ARGS, env={"FAILSIGHT_AGENT_EVERY": AGENT_EVERY})
    try:
        yield handle
    finally:
        if handle.proc.poll() is None:
            handle.proc.send_signal(signal.SIGINT)
        finish(handle, 60)


def produced(handle: Launch, what: str, sql: str, deadline: float) -> sqlite3.Row:
    """The first row of `sql` once the job has written one, by `deadline` (monotonic)."""
    while time.monotonic() < deadline and handle.proc.poll() is None:
        with contextlib.suppress(sqlite3.OperationalError), contextlib.closing(handle.db()) as db:
            if row := db.execute(sql).fetchone():
                return row
        time.sleep(0.5)
    output = f"{handle.output}\n{handle.logs()}"
    pytest.fail(f"the main job produced no {what} in time:\n{output}")


def wait_for_the_journey(handle: Launch) -> Journey:
    banner = handle.banner(STARTED)
    assert banner.password, "a first launch prints the admin's password"
    by = time.monotonic() + PRODUCED
    switched = produced(
        handle,
        "switched run",
        """SELECT n.id, n.source, f.id AS replaced, f.source AS replaced_source, f.failure_type
           FROM orchestrator_run n JOIN orchestrator_run f ON f.id = n.switched_from_id""",
        by,
    )
    built_in = produced(
        handle,
        "open review item of the built-in coordinator",
        "SELECT id FROM orchestrator_reviewitem WHERE state = 'open' AND origin = 'built_in'"
        " ORDER BY id",
        by,
    )
    agents = produced(
        handle,
        "open review item of crm-agent",
        """SELECT i.id FROM orchestrator_reviewitem i JOIN orchestrator_run r ON r.id = i.run_id
           WHERE i.state = 'open' AND i.origin = 'agent' AND r.agent = 'crm-agent'""",
        by,
    )
    # The tour settled: the counts hold still while a tile and its runs list are compared.
    produced(
        handle,
        "quiet moment",
        """SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM orchestrator_run
                                      WHERE status IN ('queued', 'running'))""",
        by,
    )
    return Journey(banner, switched, built_in["id"], agents["id"])


def reload_until(page: Page, selector: str, what: str, timeout: float = ACTED):
    """Reload the page until `selector` shows: the job acts in its own time."""
    deadline = time.monotonic() + timeout
    while not page.locator(selector).count():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not shown within {timeout} s on {page.url}")
        page.wait_for_timeout(1000)
        page.reload()
        page.wait_for_load_state("networkidle")
    return page.locator(selector)


def menu(page: Page, name: str) -> None:
    page.locator("nav.mainnav a", has_text=re.compile(rf"^{name}\b")).click()
    page.wait_for_load_state("networkidle")


def follow(link) -> None:
    link.click()
    link.page.wait_for_load_state("networkidle")


def claim(page: Page, item: int):
    """Expand the queue's row of review item `item` and claim it; return its resolve form."""
    card = page.locator(f"li#review-{item} article.card")
    page.locator(f"li#review-{item} summary").click()
    card.locator("button", has_text="Claim").click()
    # The form is there before the claim too: wait for the claim's answer to replace the card.
    expect(card).to_contain_text("Claimed: it is yours")
    form = card.locator("form.resolve")
    expect(form).to_be_visible()
    return card, form


def sign_in(page: Page, journey: Journey) -> None:
    login(page, "admin", journey.banner.password)
    expect(page.locator("h1").first).to_have_text("Overview")


def tile_to_runs(page: Page, journey: Journey) -> None:
    failure_type = journey.switched["failure_type"]
    tile = page.locator(f'[data-tile="ft-{failure_type}"]')
    count = int(tile.locator("[data-value]").inner_text().replace(",", ""))
    assert count >= 1
    follow(tile.locator("a.tile-main"))
    assert f"failure_type={failure_type}" in page.url
    plural = "s" if count != 1 else ""
    expect(page.locator("#runs-total")).to_contain_text(f"{count} run{plural} match")
    expect(page.locator("table.runs tbody tr")).to_have_count(count)


def switched_run(page: Page, journey: Journey) -> None:
    replaced = f"/runs/{journey.switched['replaced']}/"
    follow(page.locator(f"table.runs a[href='{replaced}']"))
    expect(page.locator("#decided-by")).to_contain_text("the policy for")
    follow(page.locator("#replaced-by a"))
    assert page.url.endswith(f"/runs/{journey.switched['id']}/")
    started_in_place = page.locator("#switched-from")
    expect(started_in_place).to_contain_text(
        f"Started in place of run #{journey.switched['replaced']} "
        f"on {journey.switched['replaced_source']}"
    )
    follow(started_in_place.locator("a"))
    assert page.url.endswith(replaced)


def retry_with_edited_input(page: Page, journey: Journey) -> None:
    menu(page, "Review")
    card, form = claim(page, journey.built_in)
    form.locator("input[name=resolution][value=retry_edited]").check()
    expect(form.locator("details.edited")).to_have_attribute("open", "")
    edited = form.locator("textarea[name=edited_input]")
    attempted = json.loads(edited.input_value())
    query = f"{attempted.get('query', '')} (narrower)".strip()
    edited.fill(json.dumps(attempted | {"query": query}))
    form.locator("textarea[name=note]").fill("access granted; a narrower query")
    form.locator("button", has_text="Resolve").click()
    expect(card).to_contain_text("Resolved (retry with edited input)")
    follow(card.locator(".review-head a[href^='/runs/']"))
    follow(reload_until(page, "#next-attempt a", "the edited retry"))
    expect(page.locator("#run-line")).to_contain_text("attempt 2")
    expect(page.locator("pre.json").first).to_contain_text(query)


def agent_acts_on_its_resolution(page: Page, journey: Journey) -> None:
    menu(page, "Review")
    card, form = claim(page, journey.agents)
    form.locator("input[name=resolution][value=retry]").check()
    form.locator("textarea[name=note]").fill("the key was rotated: try again")
    form.locator("button", has_text="Resolve").click()
    expect(card).to_contain_text("recorded for the agent's own coordinator")
    follow(page.locator(f"#sum-{journey.agents} a.qid"))
    picked = reload_until(page, ".delivery[data-delivered=yes]", "the agent's pickup")
    expect(picked).to_contain_text("Picked up by the agent")
    follow(page.locator(".review-head a[href^='/runs/']"))
    follow(reload_until(page, "#next-attempt a", "crm-agent's follow-up run"))
    expect(page.locator("#run-line")).to_contain_text("crm-agent")


def policy_dry_run_save_restore(page: Page, journey: Journey) -> None:
    menu(page, "Policies")
    version = int(page.locator("#policy-version strong").inner_text().lstrip("v"))
    row = page.locator("table.policies tr.ft-invalid_input")
    row_id = row.get_attribute("id")
    row.locator("a", has_text="Edit").click()
    editing = page.locator(f"#{row_id}.editing")
    editing.locator("button", has_text="Dry run").click()
    why = editing.locator("#dry-run-why")
    expect(why).to_contain_text(f"makes the same decisions as the current one (v{version})")
    deadline = editing.locator("input[name=review_deadline]")
    # Entered in hours as the table shows it; ten minutes more, with a unit.
    deadline.fill(f"{float(deadline.input_value()) * 60 + 10:g}m")
    editing.locator("button", has_text="Dry run").click()
    expect(why).to_contain_text("act after a decision: not replayed")
    editing.locator("input[name=note]").fill("a newcomer's first edit")
    editing.locator("button", has_text="Save").click()
    expect(page.locator(f"#{row_id}:not(.editing)")).to_be_visible()
    expect(page.locator("#history")).to_contain_text("a newcomer's first edit")
    expect(page.locator("#policy-version")).to_contain_text(f"v{version + 1}")
    follow(page.locator(f"#version-{version} a", has_text=f"Restore version {version}"))
    confirm = page.locator("#confirm-restore")
    expect(confirm).to_contain_text("review_deadline")  # what the restore would change
    confirm.locator("input[name=note]").fill("back to how it was")
    follow(confirm.locator("button", has_text="Confirm restore"))
    history = page.locator("#history")
    expect(history).to_contain_text(re.compile(rf"restore of v{version}\s*→\s*v{version + 2}"))
    expect(history).to_contain_text("back to how it was")


def switches_and_retry_audit(page: Page, journey: Journey) -> None:
    menu(page, "Switches")
    expect(page.locator("h1")).to_have_text("Switch efficacy")
    expect(page.locator("main")).to_contain_text(journey.switched["replaced_source"])
    expect(page.locator("main")).to_contain_text(journey.switched["source"])
    menu(page, "Retry audit")
    expect(page.locator("h1")).to_have_text("Retry audit")


def global_search(page: Page, journey: Journey) -> None:
    box = page.locator("header.topbar input[name=q]")
    box.fill("crm-agent")
    box.press("Enter")
    page.wait_for_load_state("networkidle")
    assert "/search/?q=crm-agent" in page.url
    expect(page.locator("section.search-section")).to_have_count(4)
    for section in ("runs", "reviews"):
        assert page.locator(f"#search-{section} li.hit").count() >= 1, section


def metrics_as_staff(page: Page, journey: Journey) -> None:
    answer = page.goto("/metrics")  # no page links to it
    assert answer.status == 200, answer.text()[:500]
    families = set(re.findall(r"^# TYPE (failsight_\w+) ", answer.text(), re.M))
    assert "failsight_runs_total" in families and len(families) >= 3, families


STEPS: list[tuple[str, Callable[[Page, Journey], None]]] = [
    ("sign in", sign_in),
    ("tile to its runs", tile_to_runs),
    ("switched run", switched_run),
    ("claim, retry with edited input", retry_with_edited_input),
    ("crm-agent's escalation acted on", agent_acts_on_its_resolution),
    ("policy dry run, save, restore", policy_dry_run_save_restore),
    ("switches and retry audit", switches_and_retry_audit),
    ("global search", global_search),
    ("/metrics as staff", metrics_as_staff),
]


def test_a_newcomer_walks_the_running_job_without_a_console_error(browser, job):
    journey = wait_for_the_journey(job)
    timings = {}
    with open_tab(browser, job.base, timeout=20) as page:
        for name, walk in STEPS:
            started = time.monotonic()
            walk(page, journey)
            page.watcher.assert_clean(no_console_error=True)
            timings[name] = round(time.monotonic() - started, 1)
    print(f"\nnewcomer's journey, seconds a step: {timings}")
