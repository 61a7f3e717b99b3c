"""What operators see of an agent that went away: a resolution nobody picked up within
RESOLUTION_PICKUP_TIMEOUT says "not picked up (agent gone?)" and is counted by an overview tile
whose list shows exactly those items; a run in flight says when its deadline finishes it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard.tiles import overview_tiles
from insights.stats import WINDOWS
from orchestrator.coordination.actions import do_resolve_review
from orchestrator.models import ApiToken, ReviewItem, Run, Workflow
from orchestrator.vocabulary import Channel, Delivery, Origin

from .conftest import make_failure, make_review, make_run, signed_in

QUEUE = reverse("dashboard:review_queue")
GONE = "not picked up (agent gone?)"


@pytest.fixture(autouse=True)
def _ten_minutes(settings) -> None:
    settings.RESOLUTION_PICKUP_TIMEOUT = 600


def resolution(operator: Any, minutes_ago: float, token: ApiToken | None, **fields: Any) -> Any:
    run = make_failure("auth_failure", token=token, **fields)
    item = make_review(run)
    do_resolve_review(item, operator, "abort", channel=Channel.DASHBOARD, note="stop")
    resolved_at = timezone.now() - timedelta(minutes=minutes_ago)
    ReviewItem.objects.filter(pk=item.pk).update(resolved_at=resolved_at)
    item.refresh_from_db()
    return item


def pickup_tile() -> Any:
    return next(t for t in overview_tiles(WINDOWS["24h"])["attention"] if t.key == "pickup")


def test_a_resolution_left_past_the_pickup_deadline_says_the_agent_may_be_gone(operator):
    token, _ = ApiToken.issue("crm-agent")
    fresh = resolution(operator, 1, token)
    stale = resolution(operator, 11, token)
    client = signed_in(operator)
    fresh_page = client.get(reverse("dashboard:review_item", args=[fresh.pk])).content.decode()
    assert "not picked up yet" in fresh_page and GONE not in fresh_page
    stale_page = client.get(reverse("dashboard:review_item", args=[stale.pk])).content.decode()
    assert GONE in stale_page and "within 10 m of the decision" in stale_page
    assert "not picked up yet" not in stale_page
    stale.acknowledge(Delivery.ACK)
    acked = client.get(reverse("dashboard:review_item", args=[stale.pk])).content.decode()
    assert GONE not in acked and "Picked up by the agent" in acked


def test_the_tile_counts_exactly_the_resolutions_its_list_shows(operator, monkeypatch):
    from dashboard import queue

    token, _ = ApiToken.issue("crm-agent")
    gone = {resolution(operator, 11 + i, token).pk for i in range(3)}
    resolution(operator, 2, token)  # still within the deadline
    resolution(operator, 30, token).acknowledge(Delivery.ACK)  # picked up
    built_in = Workflow.objects.create(name="research", topics=["t"], capability="web_research")
    inside = resolution(operator, 30, None, workflow=built_in)  # the coordinator applies it
    assert inside.origin == Origin.BUILT_IN
    make_review(make_failure("unclassified", token=token))  # open: nothing to pick up yet
    tile = pickup_tile()
    assert (tile.value, tile.tone) == ("3", "warn") and "agent gone?" in tile.sub
    monkeypatch.setattr(queue, "PAGE_SIZE", 2)  # the count holds across the list's pages
    page = signed_in(operator).get(tile.href)
    assert page.status_code == 200 and page.context["matching"] == 3
    second = signed_in(operator).get(tile.href + f"&after={page.context['page'].next}")
    listed = [item.pk for p in (page, second) for item in p.context["page"].rows]
    assert set(listed) == gone and len(listed) == 3
    html = page.content.decode()
    assert html.count(GONE) >= 2 and "3</strong> resolutions not picked up" in html


def test_the_tile_is_calm_when_every_agent_picked_up(db):
    tile = pickup_tile()
    assert (tile.value, tile.tone) == ("0", "ok")
    assert tile.href == QUEUE + "?state=resolved&pickup=overdue"


def test_the_pickup_filter_is_for_resolutions_only(operator, outsider):
    refused = signed_in(operator).get(QUEUE + "?state=open&pickup=overdue")
    assert refused.status_code == 400
    assert "Only resolutions are picked up" in refused.content.decode()
    assert signed_in(operator).get(QUEUE + "?pickup=later").status_code == 400
    assert signed_in(outsider).get(QUEUE + "?pickup=overdue").status_code == 403


def test_the_overview_shows_the_tile_with_its_link(operator):
    resolution(operator, 20, ApiToken.issue("crm-agent")[0])
    html = signed_in(operator).get(reverse("dashboard:overview")).content.decode()
    tile = html[html.index('data-tile="pickup"') :].split('data-tile="', 2)[1]
    assert "Resolutions not picked up" in tile and "pickup=overdue" in tile
    assert '<span class="tile-value" data-value>1</span>' in tile


def test_an_agents_run_in_flight_shows_when_its_deadline_finishes_it(operator, settings):
    settings.RUN_RUNNING_TIMEOUT = 900
    token, _ = ApiToken.issue("crm-agent", running_timeout=timedelta(hours=1))
    created = timezone.now() - timedelta(minutes=5)
    own = make_run(status=Run.Status.RUNNING, token=token, created_at=created)
    plain = make_run(
        status=Run.Status.RUNNING, token=ApiToken.issue("plain")[0], created_at=created
    )
    worker = make_run(status=Run.Status.RUNNING, created_at=created, lease_owner="host:1")
    html = signed_in(operator).get(reverse("dashboard:in_flight")).content.decode()
    rows = {int(r.split('"')[0]): r for r in html.split('data-run="')[1:]}
    for run, timeout in ((own, timedelta(hours=1)), (plain, timedelta(minutes=15))):
        deadline = timezone.localtime(created + timeout)
        assert f'else a timeout at <time datetime="{deadline:%Y-%m-%dT%H:%M:%S}' in rows[run.pk]
    assert "else a timeout" not in rows[worker.pk]
