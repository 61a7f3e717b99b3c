"""Overview tiles: counts from rollups plus the live hour, deltas, sparklines, links, polling."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.urls import reverse

from dashboard.models import RunRollup
from dashboard.stats import WINDOWS, refresh_rollups, window_stats
from dashboard.tiles import overview_tiles
from orchestrator.models import Action, Run

from .conftest import make_failure, make_review, make_run, make_workflow

NOW = datetime(2025, 3, 10, 14, 30, tzinfo=UTC)


@pytest.fixture
def clock():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


def at(hours_ago: float, **fields) -> Run:
    return make_run(created_at=NOW - timedelta(hours=hours_ago), **fields)


def fail_at(hours_ago: float, failure_type: str = "timeout", **fields) -> Run:
    return make_failure(failure_type, created_at=NOW - timedelta(hours=hours_ago), **fields)


def test_rollups_fold_complete_hours_and_leave_the_current_one_live(db, clock):
    at(3.2)
    at(3.1, result_count=0)
    fail_at(2.5, "rate_limited", partial_count=2)
    at(0.1)  # the current hour: never stored
    written = refresh_rollups(NOW - timedelta(hours=6))
    assert written == 2  # one row per (hour, status, failure type, source)
    rows = {(r.hour.hour, r.status, r.failure_type): r for r in RunRollup.objects.all()}
    assert rows[(11, "succeeded", "")].count == 2
    assert rows[(11, "succeeded", "")].empty_runs == 1
    assert rows[(12, "failed", "rate_limited")].partial_items == 2
    assert not RunRollup.objects.filter(hour__gte=NOW.replace(minute=0)).exists()


def test_refreshing_twice_replaces_rows_instead_of_adding(db, clock):
    run = fail_at(2, "timeout")
    refresh_rollups(NOW - timedelta(hours=3))
    Run.objects.filter(pk=run.pk).update(status=Run.Status.ESCALATED)
    refresh_rollups(NOW - timedelta(hours=3))
    assert list(RunRollup.objects.values_list("status", "count")) == [("escalated", 1)]


def test_window_stats_sum_rollups_and_the_live_hour(db, clock):
    for h in (0.2, 1.5, 5, 23.4):
        fail_at(h, "timeout")
    at(0.3)
    fail_at(30, "timeout")  # the previous 24 h window
    refresh_rollups(NOW - timedelta(hours=72))
    stats = window_stats(WINDOWS["24h"])
    assert stats.current.by_type["timeout"] == 4
    assert stats.previous.by_type["timeout"] == 1
    assert stats.current.runs == 5
    assert sum(stats.series["timeout"]) == 4
    assert len(stats.series[""]) == 24
    assert stats.series["timeout"][-1] == 1  # the live hour is the last bucket


def test_a_run_missing_from_rollups_is_not_counted_until_folded(db, clock):
    # The tile reads rollups for complete hours: no per-request scan of the run table.
    fail_at(5, "auth_failure")
    assert window_stats(WINDOWS["24h"]).current.by_type["auth_failure"] == 0
    refresh_rollups(NOW - timedelta(hours=6))
    assert window_stats(WINDOWS["24h"]).current.by_type["auth_failure"] == 1


def test_the_one_hour_window_is_counted_live_in_five_minute_buckets(db, clock):
    fail_at(0.05, "server_fault")
    fail_at(0.9, "server_fault")
    fail_at(1.5, "server_fault")  # previous hour
    stats = window_stats(WINDOWS["1h"])
    assert stats.current.by_type["server_fault"] == 2
    assert stats.previous.by_type["server_fault"] == 1
    assert len(stats.series["server_fault"]) == 12
    assert stats.series["server_fault"][-1] == 1


def test_recovery_health_definitions(db, clock):
    first = fail_at(0.5, "rate_limited", source="news_api", decision=Action.RETRY)
    due = NOW - timedelta(minutes=10)
    # A retry that started before its due time, failed again: early and wasted.
    gave_up = fail_at(
        0.4,
        "rate_limited",
        source="news_api",
        retry_of=first,
        attempt=2,
        due_at=due,
        started_at=due - timedelta(seconds=5),
        decision=Action.SWITCH_SOURCE,
    )
    # A switch to another source that succeeded.
    at(0.3, source="scholar_api", switched_from=gave_up)
    fail_at(0.2, "auth_failure", decision=Action.ESCALATE)
    fail_at(0.1, "unclassified")
    cur = window_stats(WINDOWS["24h"]).current
    assert cur.metric["retries"] == 1
    assert cur.wasted_total == 1
    assert cur.wasted[("rate_limited", "news_api")] == 1
    assert cur.metric["early_retries"] == 1
    assert cur.metric["switched"] == 1 and cur.switched_ok == 1
    assert cur.metric["avoided_retries"] == 2  # the switch and the escalation
    assert cur.by_type["unclassified"] == 1 and cur.failures == 4


def test_tiles_link_to_the_runs_behind_them(db, clock):
    fail_at(0.2, "timeout")
    tiles = overview_tiles(WINDOWS["24h"])
    timeout = next(t for t in tiles["failures"] if t.failure_type == "timeout")
    assert timeout.value == "1"
    assert timeout.href == reverse("dashboard:runs") + "?range=24h&failure_type=timeout"
    wasted = next(t for t in tiles["recovery"] if t.key == "wasted")
    assert "flag=wasted" in wasted.href


def test_review_and_source_tiles(db, clock):
    make_review(created_at=NOW - timedelta(hours=3))
    from orchestrator.models import SourceHealth

    SourceHealth.objects.create(source="news_api", breaker_state="open")
    SourceHealth.objects.create(source="web_search", budget_tokens=0)
    SourceHealth.objects.create(source="scholar_api")
    make_workflow(status="degraded", created_at=NOW - timedelta(hours=2))
    tiles = {t.key: t for t in overview_tiles(WINDOWS["24h"])["attention"]}
    assert tiles["review"].value == "1" and "3 h" in tiles["review"].sub
    assert tiles["degraded"].value == "1"
    assert tiles["sources"].value == "2"
    assert "news_api" in tiles["sources"].href and "web_search" in tiles["sources"].href


def test_overview_page_and_its_polling_fragment(operator_client, clock):
    fail_at(0.2, "timeout")
    page = operator_client.get(reverse("dashboard:overview"))
    html = page.content.decode()
    assert "<html" in html and 'hx-trigger="every 10s"' in html
    assert 'data-tile="ft-timeout"' in html and '<svg class="spark"' in html
    fragment = operator_client.get(
        reverse("dashboard:overview") + "?window=1h", HTTP_HX_REQUEST="true"
    )
    body = fragment.content.decode()
    assert "<html" not in body and body.lstrip().startswith('<div id="tiles"')
    assert "?window=1h" in body


def test_the_poll_interval_is_a_setting(operator_client, settings, clock):
    settings.DASHBOARD_POLL_SECONDS = 0.5
    html = operator_client.get(reverse("dashboard:overview")).content.decode()
    assert 'hx-trigger="every 0.5s"' in html


def test_an_empty_installation_tells_a_newcomer_what_to_do(operator_client, clock):
    html = operator_client.get(reverse("dashboard:overview")).content.decode()
    assert "POST /api/v1/runs" in html and "make run" in html


def test_unknown_window_falls_back_to_24h(operator_client, clock):
    response = operator_client.get(reverse("dashboard:overview") + "?window=bogus")
    assert response.status_code == 200
    assert response.context["window"].name == "24h"


def test_wasted_retries_from_rollups_are_split_by_type_and_source(db, clock):
    first = fail_at(5.5, "server_fault", source="news_api")
    fail_at(5.4, "server_fault", source="news_api", retry_of=first, attempt=2)
    at(5.3, source="news_api", retry_of=first, attempt=3)
    refresh_rollups(NOW - timedelta(hours=8))
    cur = window_stats(WINDOWS["24h"]).current
    assert cur.wasted == {("server_fault", "news_api"): 1}
    assert cur.metric["retries"] == 2


def test_a_run_on_the_next_source_after_a_switch_counts_as_switched(db, clock):
    wf = make_workflow()
    failed = fail_at(
        0.5,
        "resource_missing",
        workflow=wf,
        topic="film",
        source="news_api",
        decision=Action.SWITCH_SOURCE,
        finished_at=NOW - timedelta(minutes=29),
    )
    at(0.4, workflow=wf, topic="film", source="news_wire", switched_from=failed)
    at(0.6, workflow=wf, topic="film", source="news_archive")  # the initial fan-out: not a switch
    at(0.4, workflow=wf, topic="music", source="news_wire")  # another topic
    cur = window_stats(WINDOWS["24h"]).current
    assert cur.metric["switched"] == 1 and cur.switched_ok == 1
    assert failed.decision == "switch_source"


def test_the_seven_day_window_sums_rollups_into_six_hour_buckets(db, clock):
    # NOW is 14:30, so the window's hours run from 15:00 seven days ago to the live hour 14:00,
    # in 28 buckets of 6 hours: the last bucket starts at 09:00 today, the one before at 03:00.
    fail_at(0.2)  # the live hour: last bucket
    fail_at(1.5)  # 13:00: last bucket
    fail_at(5.5)  # 09:00: first hour of the last bucket
    fail_at(6.5)  # 08:00: last hour of the bucket before
    fail_at(100)  # 10:00 four days ago: 67 hours after the start, bucket 11
    fail_at(200)  # the previous window
    refresh_rollups(NOW - timedelta(days=15))
    stats = window_stats(WINDOWS["7d"])
    series = stats.series["timeout"]
    assert len(series) == 28
    assert {i: n for i, n in enumerate(series) if n} == {11: 1, 26: 1, 27: 3}
    assert stats.current.by_type["timeout"] == 5
    assert stats.previous.by_type["timeout"] == 1
