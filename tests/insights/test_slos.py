"""SLOs per agent and source: error budget, multi-window burn rates under a controlled clock,
alerts through the webhook alert rules, the page, its CSV and /metrics."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
import time_machine
from django.core.cache import cache
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from insights import slo
from insights.models import AlertDelivery, AlertRule
from insights.tasks import evaluate_alerts
from orchestrator.models import Run

T = datetime.fromisoformat("2026-03-02T12:00:00+00:00")


def _runs(at: datetime, ok: int, failed: int, agent="planner", source="crm") -> None:
    base = dict(agent=agent, source=source, created_at=at)
    rows = [Run(status=Run.Status.SUCCEEDED, result_count=1, **base) for _ in range(ok)]
    rows += [
        Run(status=Run.Status.FAILED, failure_type="server_fault", **base) for _ in range(failed)
    ]
    Run.objects.bulk_create(rows)


@pytest.fixture
def burst(db):
    """400 quiet successes two days ago, then a burst: 2 of 10 failed 2 minutes before T and
    2 of 10 failed 15 minutes before T (a failure share of 0.2: 20 times the pace of 99 %)."""
    cache.delete(slo.CACHE_KEY)
    _runs(T - timedelta(days=2), ok=400, failed=0)
    _runs(T - timedelta(minutes=2), ok=8, failed=2)
    _runs(T - timedelta(minutes=15), ok=8, failed=2)
    _runs(T - timedelta(minutes=3), ok=5, failed=0, agent="other", source="wiki")


def _one(kind: str, name: str) -> slo.Objective:
    return next(o for o in slo.objectives() if (o.kind, o.name) == (kind, name))


def test_the_budget_and_both_alert_pairs_burn_during_the_burst(burst):
    with time_machine.travel(T, tick=False):
        planner = _one("agent", "planner")
        assert (planner.total, planner.good) == (420, 416)
        # 4 failures of an allowed 1 % of 420 = 4.2: almost all the budget is spent.
        assert planner.budget_remaining == pytest.approx(1 - 4 / 4.2)
        assert planner.burn_rate(5) == pytest.approx(20)
        assert planner.burn_rate(60) == pytest.approx(20)
        assert planner.alerts == ["fast", "slow"]
        assert _one("source", "crm").alerts == ["fast", "slow"]
        assert _one("agent", "other").alerts == []


def test_a_spike_that_ended_stops_the_fast_alert_but_not_the_slow_one(burst):
    with time_machine.travel(T + timedelta(minutes=10), tick=False):
        planner = _one("agent", "planner")
        assert planner.burn_rate(5) == 0  # nothing in the last five minutes
        assert planner.burn_rate(60) == pytest.approx(20)
        assert planner.alerts == ["slow"]
    with time_machine.travel(T + timedelta(hours=7), tick=False):
        assert _one("agent", "planner").alerts == []


def test_burn_alerts_are_delivered_through_the_webhook_rules(
    burst, django_capture_on_commit_callbacks
):
    fast = AlertRule.objects.create(
        name="fast burn",
        kind=AlertRule.Kind.SLO_BURN,
        window_minutes=60,
        threshold=14.4,
        url="http://127.0.0.1:9/hook",
    )
    with django_capture_on_commit_callbacks(execute=False):
        with time_machine.travel(T + timedelta(minutes=10), tick=False):
            assert evaluate_alerts() == 0  # the 5-minute window is quiet again
        with time_machine.travel(T, tick=False):
            assert evaluate_alerts() == 1
    payload = AlertDelivery.objects.get(rule=fast).webhook.payload
    assert payload["value"] == pytest.approx(20)
    assert payload["short_window_minutes"] == 5
    assert {(b["kind"], b["name"]) for b in payload["burning"]} == {
        ("agent", "planner"),
        ("source", "crm"),
    }


def test_a_burn_alert_watches_its_own_projects_runs(burst, django_capture_on_commit_callbacks):
    """The burst is the default project's: a rule of another project stays quiet, until that
    project's own runs burn."""
    from orchestrator.models import Project

    acme = Project.objects.create(slug="acme", name="Acme")
    rule = AlertRule.objects.create(
        name="acme burn",
        kind=AlertRule.Kind.SLO_BURN,
        window_minutes=60,
        threshold=14.4,
        url="http://127.0.0.1:9/hook",
        project=acme,
    )
    with django_capture_on_commit_callbacks(execute=False), time_machine.travel(T, tick=False):
        assert evaluate_alerts() == 0
        Run.objects.filter(agent="planner", created_at__gte=T - timedelta(hours=1)).update(
            project=acme
        )
        assert evaluate_alerts() == 1
    payload = AlertDelivery.objects.get(rule=rule).webhook.payload
    assert payload["project"] == "acme" and payload["value"] == pytest.approx(20)


def test_a_named_objective_overrides_the_default(burst, settings):
    settings.SLO_OBJECTIVES = {"agent:planner": 0.5}
    with time_machine.travel(T, tick=False):
        planner = _one("agent", "planner")
        assert planner.objective == 0.5 and planner.alerts == []


def test_the_page_its_csv_and_metrics(operator_client, client, burst, settings):
    with time_machine.travel(T, tick=False):
        html = operator_client.get(reverse("dashboard:slos")).content.decode()
        assert "planner" in html and "Burning: fast, slow" in html
        csv_text = b"".join(
            operator_client.get(reverse("dashboard:slos"), {"format": "csv"}).streaming_content
        ).decode()
        assert csv_text.splitlines()[0].startswith("kind,name,objective,runs,succeeded")
        assert "agent,planner,0.99,420,416" in csv_text
        settings.METRICS_TOKEN = "scrape"
        body = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape").content.decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    assert samples[("failsight_slo_objective", (("kind", "agent"), ("name", "planner")))] == 0.99
    crm_5m = (("kind", "source"), ("name", "crm"), ("window", "5m"))
    assert samples[("failsight_slo_burn_rate", crm_5m)] == pytest.approx(20.0)
    other = (("kind", "agent"), ("name", "other"))
    assert samples[("failsight_slo_error_budget_remaining", other)] == 1.0


def test_the_page_shows_shares_as_percentages_and_an_exhausted_budget_in_words(operator_client, db):
    cache.delete(slo.CACHE_KEY)
    with time_machine.travel(T, tick=False):
        _runs(T - timedelta(hours=1), ok=4, failed=11, agent="flaky", source="wiki")
        _runs(T - timedelta(hours=1), ok=99, failed=1, agent="steady", source="crm")
        html = operator_client.get(reverse("dashboard:slos")).content.decode()
    tiles = dict(
        re.findall(r'<p class="tile-label">agent <bdi>(\w+)</bdi></p>(.*?)</section>', html, re.S)
    )
    flaky, steady = tiles["flaky"], tiles["steady"]
    assert "26.67 % <span" in flaky and "objective 99 %" in flaky
    assert "Error budget exhausted: 73\u00d7 the failures it allows" in flaky
    assert "(11 failed, 0.15 allowed)" in flaky and "-7233" not in html and "-72" not in html
    assert "99 % <span" in steady and "Error budget left: <strong>0 %</strong>" in steady
    assert "against its objective (99 % unless set otherwise" in html
