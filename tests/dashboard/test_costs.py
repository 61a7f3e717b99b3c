"""What failures cost: a hand-built history whose spend, wasted spend, spend avoided and time lost
are worked out by hand below (to the micro-unit and the second), the Costs page and its tiles equal
to the runs lists they link to, and the CSV of the tables."""

from __future__ import annotations

import csv
import io
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from html import unescape

import pytest
import time_machine
from django.core.cache import cache
from django.urls import reverse

from dashboard.tiles import cost_tiles
from insights import baseline, costs
from insights.stats import WINDOWS
from orchestrator.models import ReviewItem, Run
from orchestrator.vocabulary import Action

from .conftest import HOSTILE_SCRIPT, make_run, make_workflow

NOW = datetime(2025, 3, 10, 14, 30, tzinfo=UTC)
B = NOW - timedelta(hours=2)  # the history's first moment
SINCE = WINDOWS["24h"].bounds(NOW)[1]
D = Decimal


@pytest.fixture
def clock():
    # The pages read the report cached for the minute (PostgreSQL): each test's history is its own.
    cache.clear()
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def s(seconds: float) -> datetime:
    return B + timedelta(seconds=seconds)


def run(created: float, finished: float | None, cost: str | None, **fields) -> Run:
    fields.setdefault("status", Run.Status.SUCCEEDED)
    if fields["status"] != Run.Status.SUCCEEDED:
        fields.setdefault("result_count", 0)
    return make_run(
        created_at=s(created),
        started_at=s(created),
        finished_at=None if finished is None else s(finished),
        cost=None if cost is None else D(cost),
        **fields,
    )


def fail(created: float, finished: float, cost: str | None, failure_type: str, **fields) -> Run:
    fields.setdefault("status", Run.Status.FAILED)
    fields.setdefault("decided_at", s(finished))
    return run(created, finished, cost, failure_type=failure_type, **fields)


@pytest.fixture
def history(db, clock):
    """Seven tasks, in USD unless said (seconds from B):

    A news/alpha: a1 rate limited (Retry-After 30, retried after 30 s) 0-10; a2 fails again 10-50
      (retried after 4 s); a3 succeeds 50-70.
    B web/beta: b1 server fault with 2 partial results, switched, 100-105; b2 on scholar succeeds
      105-125 with 4 results, 2 of them b1's.
    C crm/alpha: c1 auth failure (retryable false) escalated 200-205; its review 205-905.
    D news/gamma: d1 invalid input (retryable false) retried anyway 300-301; d2 fails again 301-309,
      aborted at 310.
    E web/gamma: e1 transient, `wait` 15 s for the source's hold, 400-401; e2 succeeds 401-420.
    F news/alpha in workflow W, topic film: f1 timeout 500-505, retried after 60 s; f2 succeeds
      505-600; meanwhile W's film succeeded on web at 520.
    G crm/alpha: g1 auth failure escalated 1000-1000, no cost, its review still open (now: 7200).
    Beside them: a success on news/alpha (0.1), one in EUR (1.0), one without a cost, and a
    failure 30 hours old (outside the window)."""
    runs = {}
    runs["a1"] = a1 = fail(
        0, 10, "0.01", "rate_limited", source="news", agent="alpha", retry_after=30,
        retryable=True, decision=Action.RETRY, decision_delay=30,
    )  # fmt: skip
    runs["a2"] = fail(
        10, 50, "0.01", "rate_limited", source="news", agent="alpha", retry_of=a1, attempt=2,
        decision=Action.RETRY, decision_delay=4,
    )  # fmt: skip
    runs["a3"] = run(
        50, 70, "0.012", source="news", agent="alpha", retry_of=a1, attempt=3,
        results=[{"t": "x"}], result_count=1,
    )  # fmt: skip
    runs["b1"] = b1 = fail(
        100, 105, "0.02", "server_fault", source="web", agent="beta", retryable=True,
        partial_results=[{"u": 1}, {"u": 2}], partial_count=2, decision=Action.SWITCH_SOURCE,
    )  # fmt: skip
    runs["b2"] = run(
        105, 125, "0.04", source="scholar", agent="beta", switched_from=b1,
        results=[{"u": 1}, {"u": 2}, {"u": 3}, {"u": 4}], result_count=4,
    )  # fmt: skip
    runs["c1"] = c1 = fail(
        200, 205, "0.005", "auth_failure", source="crm", agent="alpha", retryable=False,
        status=Run.Status.ESCALATED, decision=Action.ESCALATE,
    )  # fmt: skip
    ReviewItem.objects.create(
        run=c1, reason="stale key", created_at=s(205), resolved_at=s(905),
        state=ReviewItem.State.RESOLVED, resolution=ReviewItem.Resolution.ACCEPT_PARTIAL,
    )  # fmt: skip
    runs["d1"] = d1 = fail(
        300, 301, "0.003", "invalid_input", source="news", agent="gamma", retryable=False,
        decision=Action.RETRY, decision_delay=2,
    )  # fmt: skip
    runs["d2"] = fail(
        301, 309, "0.003", "invalid_input", source="news", agent="gamma", retryable=False,
        retry_of=d1, attempt=2, decision=Action.ABORT, decided_at=s(310),
    )  # fmt: skip
    runs["e1"] = e1 = fail(
        400, 401, "0.001", "transient", source="web", agent="gamma", decision=Action.WAIT,
        decision_delay=15,
    )  # fmt: skip
    runs["e2"] = run(401, 420, "0.001", source="web", agent="gamma", retry_of=e1, attempt=2)
    wf = make_workflow(created_at=s(490))
    runs["f1"] = f1 = fail(
        500, 505, "0.002", "timeout", source="news", agent="alpha", workflow=wf, topic="film",
        decision=Action.RETRY, decision_delay=60,
    )  # fmt: skip
    runs["f2"] = run(
        505, 600, "0.002", source="news", agent="alpha", workflow=wf, topic="film", retry_of=f1,
        attempt=2,
    )  # fmt: skip
    runs["f_web"] = run(500, 520, "0.002", source="web", agent="alpha", workflow=wf, topic="film")
    runs["g1"] = g1 = fail(
        1000, 1000, None, "auth_failure", source="crm", agent="alpha", retryable=False,
        status=Run.Status.ESCALATED, decision=Action.ESCALATE,
    )  # fmt: skip
    ReviewItem.objects.create(run=g1, reason="stale key again", created_at=s(1000))
    runs["ok"] = run(2000, 2001, "0.1", source="news", agent="alpha")
    runs["eur"] = run(2000, 2001, "1", source="news", agent="alpha", cost_currency="EUR")
    runs["free"] = run(2000, 2001, None, source="news", agent="alpha")
    old = NOW - timedelta(hours=30)
    make_run(
        created_at=old, finished_at=old, status=Run.Status.FAILED, failure_type="timeout",
        cost=D("5"), decision=Action.SWITCH_SOURCE, source="news", agent="alpha",
    )  # fmt: skip
    return runs


# Worked out by hand from the docstring above.
SPEND = D("0.01") + D("0.01") + D("0.012") + D("0.02") + D("0.04") + D("0.005") + D("0.003")
SPEND += D("0.003") + D("0.001") + D("0.001") + D("0.002") * 3 + D("0.1")  # = 0.211
# a2 and d2 failed again after a retry; b2 fetched 2 of its 4 results again (b1 had them).
WASTED = D("0.01") + D("0.003") + D("0.04") * 2 / 4  # = 0.033
# Against the status-aware baseline, the failures routed elsewhere that it would have retried: b1
# only (server fault, retryable, attempt 1); c1, d2 and g1 said a retry cannot help (an auth
# failure, invalid input), which no status-aware retry retries. The window's recorded retries:
# a1 -> a2 failed, a2 -> a3 ok, d1 -> d2 failed, f1 -> f2 ok: p = 2/4 (by action: none of type
# server_fault on web). b1's 2 retries left: 1 + 1/2 calls at 0.02, each waiting its backoff
# (b1 gave no Retry-After: 1 s, then 2 s) and calling as long as b1 did (5 s).
AVOIDED = D("0.02") * D("1.5")  # = 0.03
AVOIDED_SECONDS = (1 + 5) + (2 + 5) / 2
# a1 10->50 (30 provider), a2 50->70, b1 105->125, c1 205->905 (700 human), d1 301->309,
# d2 309->310, e1 401->420 (15 provider), f1 505->520 (the topic succeeded on web at 520),
# g1 1000->7200 (open review: 6200 human).
LOST = 40 + 20 + 20 + 700 + 8 + 1 + 19 + 15 + 6200
PROVIDER = 30 + 15
HUMAN = 700 + 6200


def test_the_totals_to_the_micro_unit_and_the_second(history):
    report = costs.report(SINCE, NOW)
    t = report.total
    assert (D("0.211"), D("0.033"), D("0.03")) == (SPEND, WASTED, AVOIDED)  # the sums above
    assert t.spend == SPEND and t.priced_runs == 14
    assert report.other_currency_runs == 1
    assert t.wasted == WASTED and t.wasted_runs == 3
    assert t.avoided == AVOIDED and t.avoided_runs == 1 and t.avoided_seconds == AVOIDED_SECONDS
    assert (t.lost, t.provider, t.human) == (LOST, PROVIDER, HUMAN)
    assert t.work == LOST - PROVIDER - HUMAN == 10 + 20 + 20 + 8 + 1 + 4 + 15
    assert (t.failures, t.reviewed) == (9, 2)
    assert report.refetched == {history["b2"].pk: D("0.020000")}


def test_each_failure_s_delay_split_three_ways(history):
    delays = costs.report(SINCE, NOW, keep_delays=True).delays
    expected = {
        "a1": (40, 30, 0),
        "a2": (20, 0, 0),
        "b1": (20, 0, 0),
        "c1": (700, 0, 700),
        "d1": (8, 0, 0),
        "d2": (1, 0, 0),
        "e1": (19, 15, 0),
        "f1": (15, 0, 0),
        "g1": (6200, 0, 6200),
    }
    got = {k: delays[history[k].pk] for k in expected}
    assert {k: (d.total, d.provider, d.human) for k, d in got.items()} == expected
    assert [k for k, d in got.items() if d.open] == ["g1"]


def test_the_tables_per_source_agent_and_failure_type(history):
    report = costs.report(SINCE, NOW)
    source = report.tables["source"]
    assert source["news"].spend == D("0.01") * 2 + D("0.012") + D("0.003") * 2 + D("0.002") * 2 + D(
        "0.1"
    )
    assert source["news"].wasted == D("0.013") and source["news"].avoided == 0
    assert source["news"].lost == 40 + 20 + 8 + 1 + 15
    assert (source["web"].spend, source["web"].avoided) == (D("0.024"), D("0.03"))
    assert (source["scholar"].wasted, source["scholar"].lost) == (D("0.02"), 0)
    assert (source["crm"].spend, source["crm"].avoided) == (D("0.005"), 0)
    assert (source["crm"].human, source["crm"].failures) == (HUMAN, 2)
    agent = report.tables["agent"]
    assert agent["alpha"].spend == D("0.01") * 2 + D("0.012") + D("0.005") + D("0.002") * 3 + D(
        "0.1"
    )
    assert (agent["beta"].spend, agent["beta"].wasted) == (D("0.06"), D("0.02"))
    assert (agent["gamma"].spend, agent["gamma"].lost) == (D("0.008"), 8 + 1 + 19)
    ftype = report.tables["failure_type"]
    assert (ftype["rate_limited"].spend, ftype["rate_limited"].wasted) == (D("0.02"), D("0.01"))
    assert (ftype["rate_limited"].lost, ftype["rate_limited"].provider) == (60, 30)
    assert ftype[""].wasted == D("0.02")  # b2 succeeded: its refetch sits with the successes
    assert sum((line.spend for line in ftype.values()), D(0)) == SPEND
    if costs.has_project():
        assert sum((line.spend for line in report.tables["project"].values()), D(0)) == SPEND


def listed(client, href: str) -> set[int]:
    """The run ids the runs list shows for a link (one page: the history is small)."""
    page = client.get(unescape(href))
    assert page.status_code == 200, href
    assert page.context["page"].next is None
    return {r.pk for r in page.context["runs"]}


def test_every_tile_equals_the_list_it_links_to(history, operator_client):
    report = costs.report(SINCE, NOW, keep_delays=True)
    tiles = {t.key: t for t in cost_tiles(WINDOWS["24h"], report)}
    assert tiles["spend"].value == "0.21 USD"
    assert len(listed(operator_client, tiles["spend"].href)) == report.total.priced_runs == 14
    wasted = listed(operator_client, tiles["wasted_spend"].href)
    assert wasted == {history[k].pk for k in ("a2", "d2", "b2")}
    avoided = listed(operator_client, tiles["avoided_spend"].href)
    assert avoided == {history["b1"].pk}
    lost = listed(operator_client, tiles["time_lost"].href)
    assert lost == set(report.delays) and len(lost) == report.total.failures
    human = listed(operator_client, tiles["human_wait"].href)
    assert human == {history["c1"].pk, history["g1"].pk}


def test_the_costs_page_tables_link_to_their_runs(history, operator_client):
    page = operator_client.get(reverse("dashboard:costs") + "?window=24h")
    assert page.status_code == 200
    html = page.content.decode()
    assert "0.21 USD" in html and "0.03 USD" in html and "0.06 USD" not in html
    # The page says what spend and time avoided are counted against; no blind policy.
    assert "against status-aware retries" in html and "blind" not in html.lower()
    web = re.search(r'<tr data-key="web">(.*?)</tr>', html, re.S).group(1)
    assert "9.5 s" in web  # b1's time avoided
    news = re.search(r'<tr data-key="news">(.*?)</tr>', html, re.S).group(1)
    link = re.search(r'href="([^"]*flag=wasted_spend[^"]*)"', news).group(1)
    assert listed(operator_client, link) == {history["a2"].pk, history["d2"].pk}


def test_the_cost_tables_as_csv(history, operator_client):
    response = operator_client.get(reverse("dashboard:costs") + "?window=24h&format=csv")
    assert response.status_code == 200
    body = b"".join(response.streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(body)))
    total = rows[0]
    assert (total["dimension"], total["currency"]) == ("total", "USD")
    assert D(total["spend"]) == SPEND and D(total["wasted_spend"]) == WASTED
    assert D(total["spend_avoided"]) == AVOIDED
    assert float(total["time_avoided_seconds"]) == AVOIDED_SECONDS
    assert float(total["time_lost_seconds"]) == LOST
    assert float(total["human_wait_seconds"]) == HUMAN
    scholar = next(r for r in rows if r["dimension"] == "source" and r["value"] == "scholar")
    assert D(scholar["wasted_spend"]) == D("0.02")
    dims = {r["dimension"] for r in rows}
    assert {"failure_type", "source", "agent"} <= dims


def test_an_agent_s_names_are_escaped_and_the_page_needs_a_sign_in(
    db, clock, client, operator_client
):
    make_run(
        source=HOSTILE_SCRIPT,
        agent=HOSTILE_SCRIPT,
        cost=D("1"),
        created_at=NOW - timedelta(minutes=5),
    )
    html = operator_client.get(reverse("dashboard:costs")).content.decode()
    assert HOSTILE_SCRIPT not in html and "&lt;script&gt;" in html
    anonymous = client.get(reverse("dashboard:costs"))
    assert anonymous.status_code == 302 and "login" in anonymous["Location"]
    overview = operator_client.get(reverse("dashboard:overview"))
    assert 'data-tile="wasted_spend"' in overview.content.decode()


def test_a_chosen_project_s_costs_equal_its_lists(db, clock, operator_client):
    from orchestrator.models import Project

    from .test_projects import switch

    acme = Project.objects.create(slug="acme", name="Acme")
    first = make_run(
        created_at=NOW - timedelta(minutes=9), status=Run.Status.FAILED, failure_type="timeout",
        cost=D("0.25"), decision=Action.RETRY, project=acme, source="news",
    )  # fmt: skip
    again = make_run(
        created_at=NOW - timedelta(minutes=8), status=Run.Status.FAILED, failure_type="timeout",
        cost=D("0.5"), retry_of=first, attempt=2, project=acme, source="news",
    )  # fmt: skip
    make_run(created_at=NOW - timedelta(minutes=7), cost=D("4"), source="news")  # the default's
    switch(operator_client, acme)
    report = costs.report(SINCE, NOW, projects=(acme.pk,))
    assert (report.total.spend, report.total.wasted) == (D("0.75"), D("0.5"))
    page = operator_client.get(reverse("dashboard:costs")).content.decode()
    assert "0.75 USD" in page and "4.75 USD" not in page
    tiles = {t.key: t for t in cost_tiles(WINDOWS["24h"], report)}
    assert listed(operator_client, tiles["spend"].href) == {first.pk, again.pk}
    assert listed(operator_client, tiles["wasted_spend"].href) == {again.pk}
    everyone = costs.report(SINCE, NOW)
    assert everyone.total.spend == D("4.75")


def test_reports_are_kept_until_stale_and_beat_warms_them(history, postgres):
    w = WINDOWS["24h"]
    first = costs.cached_report(w, NOW)
    make_run(created_at=NOW - timedelta(minutes=1), cost=D("1"), source="news")
    later = NOW + timedelta(seconds=costs.STALE_SECONDS["24h"])
    assert costs.cached_report(w, later).spend_as_of == first.spend_as_of == (NOW, SPEND)
    fresh = costs.cached_report(w, later + timedelta(seconds=1))
    assert fresh.spend_as_of == (later + timedelta(seconds=1), SPEND + 1)
    assert costs.warm(later + timedelta(seconds=2)) == ["1h", "7d"]  # 24h is a second old
    assert costs.warm(later + timedelta(seconds=3)) == []


def test_the_status_aware_baseline_waits_each_call_s_retry_after():
    # A rate-limited call of 2 s told to wait 30 s, retried twice, the first retry recovering at
    # rate 1/2: 1 + 1/2 calls, each waiting 30 s and taking 2 s.
    assert baseline.expected(1, 0.5, 30, 2.0) == (1.5, 32 + 32 / 2)
    # No Retry-After: 1 s, then 2 s of backoff; its third attempt is the last.
    assert baseline.expected(1, 0.0, None, 0.0) == (2.0, 3.0)
    assert baseline.expected(3, 0.0, None, 0.0) == (0.0, 0.0)
    # Only what the failure's own verdict (else its type) calls retryable is retried.
    assert baseline.retries({"retryable": None, "failure_type": "timeout"})
    assert not baseline.retries({"retryable": None, "failure_type": "auth_failure"})
    assert not baseline.retries({"retryable": False, "failure_type": "server_fault"})


def test_the_no_failure_row_and_the_headers(history, operator_client):
    html = operator_client.get(reverse("dashboard:costs") + "?window=24h").content.decode()
    assert '<th scope="col">Failure type</th>' in html and "Failuretype" not in html
    # The "no failure" row's wasted spend (b2 fetched again what b1 had gathered) opens its runs.
    row = re.search(r'<tr data-key="">(.*?)</tr>', html, re.S).group(1)
    link = re.search(r'href="([^"]*flag=wasted_spend[^"]*)"', row).group(1)
    assert listed(operator_client, link) == {history["b2"].pk}
    assert 'id="no-cost"' not in html


def test_a_window_without_a_cost_says_why_and_how_to_fix_it(db, clock, operator_client):
    make_run(source="news", agent="alpha", created_at=NOW - timedelta(minutes=5))
    html = operator_client.get(reverse("dashboard:costs") + "?window=24h").content.decode()
    note = re.search(r'<div class="msg info" role="note" id="no-cost">(.*?)</div>', html, re.S)
    assert note is not None and "0.00 USD" in note.group(1)
    assert "usage" in note.group(1)
    assert reverse("admin:orchestrator_price_changelist") in note.group(1)
    assert reverse("api:openapi-view") in note.group(1)


def test_a_tiles_list_counts_exactly_as_many_runs_as_the_tile_showed(db, clock, operator_client):
    when = NOW - timedelta(minutes=30)
    Run.objects.bulk_create(
        Run(agent="a", source="news", status=Run.Status.SUCCEEDED, created_at=when,
            finished_at=when, cost=D("0.001"), cost_currency="USD")
        for _ in range(1328)
    )  # fmt: skip
    report = costs.report(SINCE, NOW)
    spend = next(t for t in cost_tiles(WINDOWS["24h"], report) if t.key == "spend")
    assert report.total.priced_runs == 1328
    query = unescape(spend.href).split("?", 1)[1]
    counted = operator_client.get(reverse("dashboard:runs_total") + "?" + query)
    assert "<strong>1,328</strong> runs match" in counted.content.decode()
    assert "estimated" not in counted.content.decode()
