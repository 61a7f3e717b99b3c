"""An item's page says whether work waits on it and who owns it, with its reminders and moves up
the chain; the queue lists the items work waits on first; a repair is offered only the
resolutions that apply to what comes next."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from orchestrator.coordination import owners
from orchestrator.models import OwnerGroup, OwnerRule, SourceHealth

from .conftest import ago, make_failure, make_review

QUEUE = reverse("dashboard:review_queue")
HX = {"HTTP_HX_REQUEST": "true"}


def page(client, item) -> str:
    response = client.get(reverse("dashboard:review_item", args=[item.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_item_page_shows_its_owner_its_reminder_and_its_moves(operator_client):
    platform = OwnerGroup.objects.create(name="platform <team>", remind_after=60, move_after=60)
    oncall = OwnerGroup.objects.create(
        name="data on call", remind_after=60, move_after=60, next_group=platform
    )
    OwnerRule.objects.create(owner_group=oncall, source="news_api")
    item = make_review(make_failure("auth_failure", source="news_api"))
    start = timezone.now() - timedelta(minutes=10)
    owners.assign(item, start)
    html = page(operator_client, item)
    assert "Owner: <strong>data on call</strong>" in html
    assert "next in the chain: platform &lt;team&gt;" in html  # escaped like everything else
    assert "assigned to data on call" in html and "reminded" not in html
    owners.remind_and_move(start + timedelta(seconds=60))
    assert "data on call reminded: Unclaimed for 1 min: data on call reminded." in page(
        operator_client, item
    )
    owners.remind_and_move(start + timedelta(seconds=120))
    html = page(operator_client, item)
    assert "Owner: <strong>platform &lt;team&gt;</strong>" in html
    assert "moved from data on call to platform &lt;team&gt;" in html
    assert 'data-blocking="yes"' in html and "blocks work" in html


def test_an_item_no_rule_matches_says_so(operator_client):
    item = make_review()
    assert "No owner group: no owner rule matches this item." in page(operator_client, item)


def test_the_queue_lists_what_work_waits_on_first(operator_client):
    repair = make_review(
        make_failure("auth_failure", source="news_api"), blocking=False, created_at=ago(hours=5)
    )
    waiting = make_review(make_failure("timeout", source="news_wire"), created_at=ago(hours=1))
    response = operator_client.get(QUEUE)
    assert [i.pk for i in response.context["page"].rows] == [waiting.pk, repair.pk]
    html = response.content.decode()
    row = html[html.index(f'id="review-{repair.pk}"') :]
    assert "work went on</span>" in row[: row.index("</li>")]
    assert "work went on</span>" not in html[html.index(f'id="review-{waiting.pk}"') :][:600]
    # Their own pages, once the items work waits on fill pages of their own.
    repairs = operator_client.get(QUEUE + "?part=repairs")
    assert [i.pk for i in repairs.context["page"].rows] == [repair.pk]


def test_a_repair_is_resolved_by_re_enabling_its_source(operator, operator_client):
    SourceHealth.objects.create(source="news_api", disabled_at=timezone.now())
    repair = make_review(make_failure("auth_failure", source="news_api"), blocking=False)
    operator_client.post(reverse("dashboard:review_claim", args=[repair.pk]))
    html = page(operator_client, repair)
    assert 'data-blocking="no"' in html and "Nothing waits on it" in html
    assert 'value="reenable_source"' in html and 'value="dismiss"' in html
    assert 'value="accept_partial"' not in html and 'value="abort"' not in html
    # A resolution a repair is not offered is refused.
    url = reverse("dashboard:review_resolve", args=[repair.pk])
    refused = operator_client.post(url, {"resolution": "abort", "note": "no"}, **HX)
    assert "not offered for this item" in refused.content.decode()
    done = operator_client.post(url, {"resolution": "reenable_source", "note": "fixed"}, **HX)
    assert done.status_code == 200
    repair.refresh_from_db()
    assert repair.resolution == "reenable_source"
    assert SourceHealth.objects.get(source="news_api").disabled_at is None
