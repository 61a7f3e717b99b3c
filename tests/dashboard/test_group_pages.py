"""The failure groups pages: a window's counts and filters, a group's runs with how each ended,
state changes (review permission), and every overview tile reaching its groups."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from dashboard.tiles import overview_tiles
from insights import groups
from insights.models import FailureGroup
from insights.stats import WINDOWS
from tests.insights.test_groups import failures_ending_every_way, timeout

from .conftest import ago, make_failure

GROUPS = reverse("dashboard:failure_groups")


def test_the_groups_page_counts_a_window_and_filters(db, operator_client):
    timeout(1, created_at=ago(days=3))
    groups.fold(timezone.now() - timedelta(days=4))
    timeout(2)
    make_failure("auth_failure", source="web_search", detail="401 key expired")
    groups.fold()
    every = operator_client.get(GROUPS)
    assert len(every.context["rows"]) == 2
    month = next(r for r in every.context["rows"] if r.group.failure_type == "timeout").spark
    assert len(month) == 30 and sum(month) == 2 and month[-1] == 1  # by day: today, 3 days ago
    assert month[-4] + month[-5] == 1
    day = operator_client.get(GROUPS + "?range=24h&failure_type=timeout")
    (row,) = day.context["rows"]
    assert (row.group.count, row.window_counts["count"]) == (2, 1)
    assert sum(row.spark) == 1 and len(row.spark) == 24
    assert operator_client.get(GROUPS + "?source=web_search").context["rows"][0].group.source == (
        "web_search"
    )
    refused = operator_client.get(GROUPS + "?range=1y&has=everything")
    assert refused.status_code == 400 and refused.context["rows"] == []
    assert "1y" in refused.content.decode() and "is not one of: 24h, 7d, 30d" in (
        refused.content.decode()
    )


def test_a_group_page_shows_its_runs_with_how_each_ended(db, operator_client):
    story = failures_ending_every_way()
    groups.fold()
    group = FailureGroup.objects.get(source="news_api")
    response = operator_client.get(reverse("dashboard:failure_group", args=[group.pk]))
    html = response.content.decode()
    assert {r.pk for r in response.context["runs"]} == {
        story[k].pk for k in ("a", "b", "c", "d", "e", "f", "g", "h")
    }
    assert "recovered by retry" in html and "recovered by switch" in html and "lost" in html
    runs = operator_client.get(reverse("dashboard:runs") + f"?group={group.pk}")
    assert len(runs.context["runs"]) == 8


def test_state_changes_need_the_review_permission(db, operator_client, outsider_client):
    timeout(1)
    groups.fold()
    group = FailureGroup.objects.get()
    url = reverse("dashboard:failure_group_state", args=[group.pk])
    assert outsider_client.post(url, {"state": "muted"}).status_code == 403
    operator_client.post(url, {"state": "muted"})
    group.refresh_from_db()
    assert group.state == "muted" and group.state_changed_by.username == "olga"
    operator_client.post(url, {"state": "bogus"})
    group.refresh_from_db()
    assert group.state == "muted"


def test_every_tile_reaches_its_groups(db, operator_client):
    timeout(1)
    groups.fold()
    tiles = overview_tiles(WINDOWS["24h"])
    everything = [t for key in ("traffic", "failures", "recovery", "attention") for t in tiles[key]]
    linked = {t.key: t.groups for t in everything if t.groups}
    sources = next(t for t in everything if t.key == "sources")
    review = next(t for t in everything if t.key == "review")
    # Nothing in trouble and no review open: nothing to drill into, so no link at all.
    assert (sources.href, sources.groups, review.groups) == ("", "", "")
    # Runs in flight have not failed, resolutions are not failures: no failure group.
    unlinked = {"sources", "review", "in_flight", "pickup"}
    assert set(linked) == {t.key for t in everything} - unlinked
    assert linked["ft-timeout"] == GROUPS + "?range=24h&failure_type=timeout"
    listed = operator_client.get(linked["ft-timeout"]).context["rows"]
    assert [r.group.failure_type for r in listed] == ["timeout"]
    for key, url in linked.items():
        assert operator_client.get(url).status_code == 200, key
    html = operator_client.get(reverse("dashboard:overview")).content.decode()
    sources_tile = html[html.index('data-tile="sources"') :].split('data-tile="', 2)[1]
    assert "href=" not in sources_tile.split("</div>\n</div>")[0]
