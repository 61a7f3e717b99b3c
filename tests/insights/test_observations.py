"""/metrics' histograms and event counters: folded from runs, review items and webhook deliveries
per hour of the event, recomputed over the last hours, merged after them without losing a count,
and served with agent and source labels bounded to the top METRICS_TOP_N."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from insights import observations, slo
from insights.models import ObservationHour
from insights.stats import refresh_rollups
from orchestrator.models import ReviewItem, Run

from .conftest import make_review, make_run
from .metrics_history import build, check_implied, parse, top

METRICS = reverse("metrics")
DURATION = "failsight_run_duration_seconds"


def scrape(client) -> dict:
    response = client.get(METRICS, HTTP_AUTHORIZATION="Bearer s3cret")
    assert response.status_code == 200
    return parse(response.content.decode())


@pytest.fixture
def token(settings) -> None:
    settings.METRICS_TOKEN = "s3cret"
    cache.delete(slo.CACHE_KEY)  # the SLO figures another test's scrape kept


def fold_all() -> None:
    """What beat does: the observations, and the rollups SQLite's run totals are summed from."""
    observations.fold()
    refresh_rollups(timezone.now() - timedelta(hours=12))


def durations(client) -> float:
    (family,) = [f for name, f in scrape(client).items() if name == DURATION]
    return sum(s.value for s in family.samples if s.name == f"{DURATION}_count")


def test_every_family_counts_what_the_history_implies(client, db, token):
    h = build(timezone.now(), {"web_search": 4, "news_api": 3})
    observations.fold()
    check_implied(h, scrape(client), source=lambda name: name)


def test_hours_past_the_lookback_are_merged_and_counts_never_go_down(client, db, token):
    now = timezone.now()
    for hours in (10, 5, 0):
        make_run(created_at=now - timedelta(hours=hours, minutes=1), duration_ms=300.0)
    observations.fold()
    assert ObservationHour.objects.filter(hour__isnull=True).exists()  # ten and five hours ago
    assert durations(client) == 3
    with time_machine.travel(now + timedelta(hours=6), tick=False):
        observations.fold()
        assert not ObservationHour.objects.filter(hour__isnull=False).exists()
        assert durations(client) == 3
        make_run(duration_ms=1500.0)
        observations.fold()
        assert durations(client) == 4


def test_a_run_finishing_after_a_fold_is_counted_by_the_next(client, db, token):
    run = make_run(status=Run.Status.RUNNING)
    observations.fold()
    assert durations(client) == 0
    Run.objects.filter(pk=run.pk).update(status=Run.Status.SUCCEEDED, duration_ms=2000.0)
    observations.fold()
    assert durations(client) == 1


def test_a_fold_after_a_stop_recomputes_from_where_the_last_one_stopped(client, db, token):
    start = timezone.now()
    observations.fold()
    with time_machine.travel(start + timedelta(hours=12), tick=False):
        make_run(created_at=start + timedelta(hours=1), duration_ms=100.0)  # beat was down
        make_run(duration_ms=100.0)
        observations.fold()
        assert durations(client) == 2


def test_sources_beyond_the_top_n_add_up_under_other(client, db, token, settings):
    settings.METRICS_TOP_N = 3
    volumes = {f"source_{i}": 20 - i for i in range(settings.METRICS_TOP_N + 5)}
    h = build(timezone.now(), volumes)
    fold_all()
    families = scrape(client)
    bound = top(h.finished, settings.METRICS_TOP_N)
    check_implied(h, families, source=bound)
    runs = [s for s in families["failsight_runs"].samples if s.name == "failsight_runs_total"]
    assert {s.labels["source"] for s in runs} == {bound(name) for name in h.finished}
    assert len({bound(name) for name in h.finished}) == settings.METRICS_TOP_N + 1
    other = sum(s.value for s in runs if s.labels["source"] == "other")
    assert other == sum(n for name, n in h.finished.items() if bound(name) == "other")
    slo_names = {
        s.labels["name"]
        for s in families["failsight_slo_objective"].samples
        if s.labels["kind"] == "source"
    }
    assert slo_names == {bound(name) for name in h.finished}


def test_all_sources_keep_their_own_series_while_they_are_at_most_n(client, db, token, settings):
    settings.METRICS_TOP_N = 2
    build(timezone.now(), {})  # two sources: news_api and web_search
    fold_all()
    runs = scrape(client)["failsight_runs"].samples
    assert {s.labels["source"] for s in runs} == {"news_api", "web_search"}


def test_a_row_without_its_events_time_is_never_counted(client, db, token):
    item = make_review()
    ReviewItem.objects.filter(pk=item.pk).update(state=ReviewItem.State.RESOLVED)  # no resolved_at
    for _ in range(2):
        observations.fold()
    family = scrape(client)["failsight_review_time_to_resolve_seconds"]
    assert [s.value for s in family.samples if s.name.endswith("_count")] == [0]
