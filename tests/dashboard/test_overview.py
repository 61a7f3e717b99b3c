"""Overview tiles: counts from rollups plus the live hour, deltas, sparklines, links, polling."""

from __future__ import annotations

import importlib
import random
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.urls import reverse

from dashboard.tiles import overview_tiles
from insights.models import RunRollup, SixHourRollup, SixHourWastedRetries
from insights.stats import (
    HOUR,
    METRICS,
    WINDOWS,
    refresh_rollups,
    rollup_lookback,
    whole_blocks,
    window_stats,
)
from orchestrator.models import Run, RunSets
from orchestrator.vocabulary import Action

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


def test_futile_retries_are_counted_by_the_wasted_and_compliance_tiles(db, clock):
    said_no = dict(source="news_api", retryable=False, decision=Action.RETRY)
    fail_at(2.5, "server_fault", status_code=501, **said_no)  # folded into the rollups
    fail_at(0.2, "server_fault", **said_no)  # the live hour
    fail_at(0.2, "auth_failure", **said_no)  # the credential refresh: not futile
    fail_at(0.2, "server_fault", source="news_api", retryable=True, decision=Action.RETRY)
    fail_at(0.2, "server_fault", source="news_api", retryable=False, decision=Action.ABORT)
    refresh_rollups(NOW - timedelta(hours=6))
    assert Run.objects.futile_retries().count() == 2
    tiles = {t.key: t for t in overview_tiles(WINDOWS["24h"])["recovery"]}
    assert tiles["futile"].value == "2 futile" and tiles["futile"].tone == "bad"
    assert "flag=futile" in tiles["futile"].href
    assert "2 spent on failures that said a retry cannot help" in tiles["wasted"].sub


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


def test_credentials_refreshed_are_counted_and_listed(operator_client, clock):
    def refreshed(hours: float) -> Run:
        run = make_failure("auth_failure", created_at=NOW - timedelta(hours=hours))
        run.record_decision(Action.RETRY, "refresh first", 1, refresh=True)
        return run

    shown, _ = refreshed(2), refreshed(30)  # the second is outside the day
    make_failure("auth_failure", created_at=NOW - timedelta(hours=1), decision=Action.ESCALATE)
    tile = {t.key: t for t in overview_tiles(WINDOWS["24h"])["attention"]}["refreshed"]
    assert tile.value == "1" and "flag=refreshed" in tile.href
    listed = operator_client.get(tile.href).content.decode()
    assert f"/runs/{shown.pk}/" in listed and "after refreshing the credentials" in listed
    page = operator_client.get(reverse("dashboard:run_detail", args=[shown.pk])).content.decode()
    assert 'id="refreshed"' in page and "then retried once" in page


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


# ---------------------------------------------------------------------------------------------
# Six-hour blocks: the same counts as the hourly rollups and the raw runs


SOURCES = ("news_api", "web_search", "scholar_api")
FAILURE_TYPES = ("timeout", "rate_limited", "server_fault", "unclassified", "auth_failure")
DECISIONS = (Action.RETRY, Action.SWITCH_SOURCE, Action.ESCALATE, Action.ABORT, "")


def random_runs(rng: random.Random, times: list[datetime]) -> None:
    """One run of a random kind per time: outcomes, retries (some early), switches, partials."""
    firsts: list[Run] = []
    failed: list[Run] = []
    attempts: dict[int, int] = defaultdict(lambda: 1)
    for created in times:
        status = rng.choice(["succeeded", "succeeded", "failed", "escalated", "queued"])
        fields: dict = {"status": status, "source": rng.choice(SOURCES), "created_at": created}
        if status in ("failed", "escalated"):
            fields |= {
                "failure_type": rng.choice(FAILURE_TYPES),
                "partial_count": rng.choice([0, 0, 2]),
                "decision": rng.choice(DECISIONS),
                "retryable": rng.choice([None, True, False]),
            }
        elif status == "succeeded":
            fields["result_count"] = rng.choice([0, 3])
        if firsts and rng.random() < 0.3:
            root = rng.choice(firsts)
            attempts[root.pk] += 1
            early = rng.random() < 0.2
            fields |= {
                "retry_of": root,
                "attempt": attempts[root.pk],
                "due_at": created,
                "started_at": created + timedelta(seconds=-1 if early else 1),
            }
        if failed and rng.random() < 0.15:
            fields["switched_from"] = rng.choice(failed)
        run = Run.objects.create(agent="researcher", **fields)
        (firsts if run.retry_of_id is None else []).append(run)
        if status in ("failed", "escalated"):
            failed.append(run)


def raw_window(window, now: datetime) -> dict:
    """What the overview must show, counted run by run from the run table (no rollups)."""
    prev_start, start, _ = window.bounds(now)
    figures = ("by_status", "by_type", "metric", "wasted")
    sides = {side: {f: Counter() for f in figures} for side in ("previous", "current")}
    series: dict[str, list[int]] = defaultdict(lambda: [0] * window.buckets)
    for run in Run.objects.filter(created_at__gte=prev_start, created_at__lte=now):
        side = sides["previous" if run.created_at < start else "current"]
        failure = run.status in ("failed", "escalated")
        retry = run.retry_of_id is not None
        side["by_status"][run.status] += 1
        if run.failure_type:
            side["by_type"][run.failure_type] += 1
        side["metric"].update(
            {
                "count": 1,
                "partial_runs": failure and run.partial_count > 0,
                "partial_items": run.partial_count if failure else 0,
                "empty_runs": run.status == "succeeded" and run.result_count == 0,
                "retries": retry,
                "early_retries": retry and run.started_at < run.due_at,
                "switched": run.switched_from_id is not None,
                "avoided_retries": failure and run.decision in RunSets.AVOIDING_DECISIONS,
                # retried although it said a retry cannot help; an auth refresh is no blind retry
                "futile_retries": failure
                and run.retryable is False
                and run.decision == Action.RETRY
                and run.failure_type != "auth_failure",
            }
        )
        if failure and retry and run.created_at >= start:  # shown for the current window only
            side["wasted"][(run.failure_type or "unknown", run.source)] += 1
        if run.created_at >= start:
            steps = (run.created_at - start) // window.unit
            index = min(steps // window.per_bucket, window.buckets - 1)
            series[""][index] += 1
            if run.failure_type:
                series[run.failure_type][index] += 1
    return {**sides, "series": dict(series)}


def shown(stats) -> dict:
    """The same figures as `raw_window`, from `window_stats` (no tile shows the previous
    window's wasted retries)."""

    def totals(t, wasted: bool) -> dict:
        figures = {"by_status": t.by_status, "by_type": t.by_type, "metric": t.metric}
        figures["wasted"] = t.wasted if wasted else {}
        return {name: Counter({k: v for k, v in d.items() if v}) for name, d in figures.items()}

    return {
        "previous": totals(stats.previous, wasted=False),
        "current": totals(stats.current, wasted=True),
        "series": {k: v for k, v in stats.series.items() if any(v)},
    }


def edge_times(window, now: datetime) -> list[datetime]:
    """Instants on each side of every boundary the tiles cut at: the two windows, the whole
    six-hour blocks and the tail after them, the live hour, and a sparkline bucket."""
    prev_start, start, anchor = window.bounds(now)
    tail = whole_blocks(start, anchor)[1] if window.unit == HOUR else anchor
    cuts = [prev_start, start, start + window.unit * window.per_bucket, tail, anchor]
    tiny = timedelta(microseconds=1)
    return [t for cut in cuts for t in (cut - tiny, cut)] + [now]


@pytest.mark.parametrize("name", ["24h", "7d", "1h"])
def test_window_stats_equal_the_raw_runs_across_every_edge(db, clock, name):
    window = WINDOWS[name]
    prev_start = window.bounds(NOW)[0]
    rng = random.Random(name)
    span = NOW - prev_start + timedelta(hours=12)
    times = [NOW - span * rng.random() for _ in range(250)] + edge_times(window, NOW)
    random_runs(rng, sorted(times))
    refresh_rollups(NOW - timedelta(days=15))
    assert shown(window_stats(window)) == raw_window(window, NOW)


def hourly_sums_by_block(current_hour: datetime) -> tuple[dict, dict]:
    """(per (start, status, failure type) metric sums, per (start, failure type, source) wasted
    retries) of every complete six-hour block, summed from the hourly rollups."""
    sums: dict = defaultdict(lambda: [0] * len(METRICS))
    wasted: dict = defaultdict(int)
    fields = ("hour", "status", "failure_type", "source", *METRICS)
    for hour, status, ftype, source, *values in RunRollup.objects.values_list(*fields):
        for offset in range(6):
            start = hour - offset * timedelta(hours=1)
            if start + timedelta(hours=6) > current_hour:
                continue
            acc = sums[(start, status, ftype)]
            sums[(start, status, ftype)] = [a + b for a, b in zip(acc, values, strict=True)]
            retries = values[METRICS.index("retries")]
            if status in ("failed", "escalated") and retries:
                wasted[(start, ftype, source)] += retries
    return dict(sums), dict(wasted)


def stored_blocks() -> tuple[dict, dict]:
    sums = {
        (b.start, b.status, b.failure_type): [getattr(b, m) for m in METRICS]
        for b in SixHourRollup.objects.all()
    }
    wasted = {
        (w.start, w.failure_type, w.source): w.retries for w in SixHourWastedRetries.objects.all()
    }
    return sums, wasted


def test_six_hour_blocks_are_the_sums_of_their_six_hourly_rollups(db, clock):
    rng = random.Random(6)
    random_runs(rng, sorted(NOW - timedelta(days=2) * rng.random() for _ in range(300)))
    refresh_rollups(NOW - timedelta(days=3))
    assert stored_blocks() == hourly_sums_by_block(NOW.replace(minute=0))
    assert all(b.phase == b.start.hour % 6 for b in SixHourRollup.objects.all())


def test_a_block_is_stored_once_its_last_hour_is_complete(db, clock):
    fail_at(5.5)  # 09:00: the first hour of the block 09:00-15:00
    fail_at(0.2)  # 14:18: its last hour, still being written
    refresh_rollups(NOW - timedelta(hours=12))
    assert max(SixHourRollup.objects.values_list("start", flat=True)).hour == 8  # 08:00-14:00
    clock.move_to(NOW + timedelta(hours=1))
    refresh_rollups(NOW + timedelta(hours=1) - rollup_lookback())  # what the beat task does
    block = SixHourRollup.objects.get(start=NOW.replace(hour=9, minute=0), status="failed")
    assert block.count == 2  # the hour that was being written is in it now
    assert stored_blocks() == hourly_sums_by_block(NOW.replace(hour=15, minute=0))


def test_refreshing_an_hour_recomputes_the_blocks_that_contain_it(db, clock):
    first = fail_at(3.8, "rate_limited", source="news_api")  # 10:42
    # 11:06, the first hour the beat task recomputes (from 11:00 at 14:30).
    retry = fail_at(3.4, "rate_limited", source="news_api", retry_of=first, attempt=2)
    refresh_rollups(NOW - timedelta(hours=12))
    # The complete blocks holding 11:00 start at 06:00, 07:00 and 08:00 (09:00-15:00 is not).
    assert sorted(w.start.hour for w in SixHourWastedRetries.objects.all()) == [6, 7, 8]
    Run.objects.filter(pk=retry.pk).update(status=Run.Status.SUCCEEDED, failure_type=None)
    refresh_rollups(NOW - rollup_lookback())
    assert not SixHourWastedRetries.objects.exists()
    assert SixHourRollup.objects.filter(status="succeeded").count() == 3
    assert stored_blocks() == hourly_sums_by_block(NOW.replace(minute=0))


def test_refolding_a_past_range_replaces_its_blocks(db, clock):
    rng = random.Random(9)
    random_runs(rng, sorted(NOW - timedelta(days=2) * rng.random() for _ in range(100)))
    refresh_rollups(NOW - timedelta(days=3))
    for _ in range(2):  # a backfill of a past day, twice: no duplicate key, same sums
        refresh_rollups(NOW - timedelta(days=2), NOW - timedelta(days=1))
    assert stored_blocks() == hourly_sums_by_block(NOW.replace(minute=0))


def test_the_migration_fills_the_blocks_the_refresh_keeps(db, clock):
    rng = random.Random(3)
    random_runs(rng, sorted(NOW - timedelta(days=2) * rng.random() for _ in range(150)))
    refresh_rollups(NOW - timedelta(days=3))
    folded = stored_blocks()
    hourly = sorted(RunRollup.objects.values_list("hour", "source", "futile_retries"))
    assert any(n for *_, n in hourly)  # the random runs hold futile retries
    SixHourRollup.objects.all().delete()
    SixHourWastedRetries.objects.all().delete()
    RunRollup.objects.update(futile_retries=0)  # as it was before the column existed
    # The models as these migrations name them: in the pages' app, which held them then.
    last = ("dashboard", "0010_insert_deltas_grouped_once")
    then = MigrationLoader(connection).project_state(last).apps
    blocks = importlib.import_module("dashboard.migrations.0003_six_hour_rollups")
    blocks.fill_blocks(then, None)
    futile = importlib.import_module("dashboard.migrations.0004_issue12_futile_retries")
    futile.fill_futile_retries(then, None)
    assert stored_blocks() == folded
    assert sorted(RunRollup.objects.values_list("hour", "source", "futile_retries")) == hourly


def test_the_success_rate_says_how_many_of_the_finished_runs_succeeded(db, clock):
    fail_at(0.2, "timeout")
    at(0.2)
    success = next(t for t in overview_tiles(WINDOWS["24h"])["traffic"] if t.key == "success")
    # "1 of 2 finished" read as if only one run had finished.
    assert success.sub == "1 of 2 finished runs succeeded"
