"""The review queue at volume: facets with counts, keyset pages both ways, a page per item that
every link points to, the grouped view and "resolve all", only resolutions that can work, and the
decisions on the workflow's timeline."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from orchestrator.coordination.actions import do_resolve_review
from orchestrator.models import ReviewItem, Run
from orchestrator.vocabulary import Channel

from .conftest import ago, make_failure, make_review, make_workflow, signed_in

QUEUE = reverse("dashboard:review_queue")
HX = {"HTTP_HX_REQUEST": "true"}


def item_url(item: ReviewItem) -> str:
    return reverse("dashboard:review_item", args=[item.pk])


def review(ftype="timeout", source="news_api", agent="researcher", workflow=None, **fields):
    run = make_failure(ftype, source=source, agent=agent, workflow=workflow, detail=f"{ftype} x")
    fields.setdefault("signature", f"{source}-{ftype}")
    return make_review(run, **fields)


def rows(response) -> list[int]:
    return [item.pk for item in response.context["page"].rows]


def facet(response, name: str) -> dict[str, int]:
    for key, _, options in response.context["facets"]:
        if key == name:
            return {o.value: o.count for o in options}
    raise AssertionError(name)


@pytest.fixture
def queue(db, operator, policy_editor):
    built_in = make_workflow(name="news digest", capability="news")
    items = {
        "a": review("timeout", "news_api", workflow=built_in, created_at=ago(hours=30)),
        "b": review("timeout", "news_api", workflow=built_in, created_at=ago(hours=5)),
        "c": review("auth_failure", "web_search", agent="crawler", created_at=ago(minutes=20)),
        "d": review("timeout", "web_search", agent="crawler", created_at=ago(minutes=10)),
    }
    items["b"].claim(operator)
    items["d"].claim(policy_editor)
    return items


def test_filters_narrow_the_queue_and_each_facet_counts_with_the_others_applied(
    queue, operator_client
):
    everything = operator_client.get(QUEUE)
    assert rows(everything) == [queue[k].pk for k in "abcd"]  # the longest wait first
    assert facet(everything, "failure_type") == {"timeout": 3, "auth_failure": 1}
    assert facet(everything, "origin") == {"built_in": 2, "agent": 2}
    assert facet(everything, "claim") == {"unclaimed": 2, "mine": 1, "others": 1}
    assert facet(everything, "age") == {"1h": 2, "24h": 1, "older": 1}
    timeouts = operator_client.get(QUEUE + "?failure_type=timeout")
    assert rows(timeouts) == [queue[k].pk for k in "abd"]
    # The failure type's own counts ignore its choice; the others' respect it.
    assert facet(timeouts, "failure_type") == {"timeout": 3, "auth_failure": 1}
    assert facet(timeouts, "source") == {"news_api": 2, "web_search": 1}
    checks = {
        "source=web_search": "cd",
        "agent=crawler": "cd",
        "origin=built_in": "ab",
        "origin=agent": "cd",
        "claim=mine": "b",
        "claim=unclaimed": "ac",
        "claim=others": "d",
        "age=1h": "cd",
        "age=24h": "b",
        "age=older": "a",
        f"workflow={queue['a'].workflow_id}": "ab",
        "failure_type=timeout&source=web_search": "d",
        "failure_type=auth_error": "c",  # an alias of auth_failure, as on the runs page
    }
    for query, expected in checks.items():
        response = operator_client.get(f"{QUEUE}?{query}")
        assert rows(response) == [queue[k].pk for k in expected], query
        assert response.context["matching"] == len(expected)


def test_the_one_statement_facet_counts_equal_a_group_by_per_facet(queue, operator, postgres):
    """PostgreSQL counts every facet in one GROUPING SETS statement; each count must equal the
    plain GROUP BY of that facet with every other filter applied (what SQLite runs)."""
    from django.db.models import Count
    from django.http import QueryDict

    from dashboard import queue as queue_module

    more = [review("server_fault", f"src{i % 3}", agent=f"agent{i % 4}") for i in range(12)]
    for item in more[::3]:
        item.claim(operator)
    now = timezone.now()
    pending = ReviewItem.objects.filter(state__in=ReviewItem.PENDING)
    annotated = pending.annotate(
        claim=queue_module._claim_bucket(operator), age=queue_module._age_bucket(now)
    )
    for query in [
        "",
        "failure_type=timeout",
        "source=src1&claim=mine",
        "agent=agent2&age=1h&origin=agent",
        f"workflow={queue['a'].workflow_id}&claim=unclaimed",
        "signature=news_api-timeout&source=news_api",
    ]:
        f = queue_module.QueueFilters(QueryDict(query))
        assert f.is_valid(), query
        expected = {
            name: dict(
                f.apply(annotated, operator, now, skip=name)
                .values_list(name)
                .annotate(n=Count("id"))
                .order_by()
            )
            for name in queue_module.FACETS
        }
        counts, total = queue_module.facet_counts(pending, f, operator, now)
        assert (counts, total) == (expected, pending.count()), query


def test_the_grouped_view_shows_the_largest_groups_and_how_many_there_are(
    db, operator_client, monkeypatch
):
    from dashboard import queue as queue_module

    for source, size in [("a_api", 3), ("b_api", 2), ("c_api", 1)]:
        for _ in range(size):
            review("timeout", source)
    monkeypatch.setattr(queue_module, "GROUPS_SHOWN", 2)
    response = operator_client.get(QUEUE + "?view=groups")
    shown = [(g.source, g.count) for g in response.context["groups"]]
    assert shown == [("a_api", 3), ("b_api", 2)] and response.context["group_total"] == 3
    assert "The 2 largest of 3 groups are shown." in response.content.decode()
    one = operator_client.get(QUEUE + "?view=groups&source=c_api")
    assert one.context["group_total"] == 1 and "largest of" not in one.content.decode()


def test_a_filter_the_queue_cannot_use_is_shown_not_ignored(queue, operator_client):
    response = operator_client.get(QUEUE + "?failure_type=meteor&claim=yours&workflow=x")
    html = response.content.decode()
    assert response.status_code == 400 and response.context["page"] is None
    assert "meteor" in html and "yours" in html and "is not a workflow id" in html
    fragment = operator_client.get(QUEUE + "?age=ancient", **HX)
    assert fragment.status_code == 200 and "ancient" in fragment.content.decode()


def test_keyset_pages_go_both_ways_without_skipping_or_repeating(db, operator_client):
    same = timezone.now() - timedelta(hours=1)
    made = [review(created_at=same).pk for _ in range(120)]
    first = operator_client.get(QUEUE)
    second = operator_client.get(QUEUE + f"?after={first.context['page'].next}")
    third = operator_client.get(QUEUE + f"?after={second.context['page'].next}")
    assert third.context["page"].next is None
    seen = rows(first) + rows(second) + rows(third)
    assert seen == sorted(made) and len(seen) == 120
    back = operator_client.get(QUEUE + f"?before={third.context['page'].previous}")
    assert rows(back) == rows(second)
    assert (
        operator_client.get(QUEUE + f"?before={back.context['page'].previous}")
        .context["page"]
        .first
    )


def test_the_queue_costs_the_same_queries_with_3_or_300_open_items(
    db, operator_client, frozen_memos
):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert operator_client.get(QUEUE).status_code == 200
            assert operator_client.get(QUEUE + "?view=groups&source=news_api").status_code == 200
        return len(captured)

    wf = make_workflow(capability="news")  # built-in: a switch asks which sources were tried
    for i in range(3):
        review(source=f"s{i % 2}", workflow=wf if i % 2 else None)
    few = queries()
    for i in range(297):
        review(
            source=f"s{i % 7}",
            agent=f"agent-{i % 5}",
            signature=f"sig-{i % 9}",
            workflow=wf if i % 2 else None,
        )
    # No more; one less, as the first page is no longer the last of the items work waits on,
    # which goes on with the first repairs (`queue.blocked_first`).
    assert queries() in (few, few - 1)


def test_every_link_to_an_item_opens_its_own_page(queue, operator_client):
    item = queue["a"]
    pages = [
        reverse("dashboard:run_detail", args=[item.run_id]),
        reverse("dashboard:workflow_detail", args=[item.workflow_id]),
        QUEUE,
    ]
    for page in pages:
        assert item_url(item) in operator_client.get(page).content.decode(), page
    own = operator_client.get(item_url(item))
    assert own.status_code == 200 and own.context["item"] == item
    assert own.context["newer"] == queue["b"].pk  # the neighbours in the queue's order
    # The card alone, for a row that expands (htmx), and the row refreshed beside a claim.
    card = operator_client.get(item_url(queue["c"]) + "?part=card", **HX).content.decode()
    assert card.lstrip().startswith('<article class="card review') and "<html" not in card
    claimed = operator_client.post(
        reverse("dashboard:review_claim", args=[queue["c"].pk]), **HX
    ).content.decode()
    assert f'id="sum-{queue["c"].pk}" hx-swap-oob="innerHTML"' in claimed
    assert "claimed by you" in claimed


def test_the_grouped_view_resolves_all_like_this_but_not_another_operators(
    db, operator, policy_editor, operator_client
):
    items = [review(signature="same", created_at=ago(minutes=50 - i)) for i in range(5)]
    review(signature="other")
    items[4].claim(policy_editor)
    response = operator_client.get(QUEUE + "?view=groups")
    group = next(g for g in response.context["groups"] if g.signature == "same")
    assert (group.count, group.held_by_others, group.item) == (4, 1, items[0])
    # The group's form loads when its disclosure opens, from the item's page (htmx).
    form_url = f"{item_url(items[0])}?part=group&amp;next=%2Freview%2F%3Fview%3Dgroups"
    assert f'hx-get="{form_url}" hx-trigger="toggle once"' in response.content.decode()
    form = operator_client.get(form_url.replace("&amp;", "&"), HTTP_HX_REQUEST="true")
    html = form.content.decode()
    assert "Resolve all 4 like this" in html and "<html" not in html
    assert 'name="next" value="/review/?view=groups"' in html
    assert 'value="abort"' in html and 'name="apply_to_group" value="on"' in html
    viewer = operator_client.get(item_url(items[4]) + "?part=group", HTTP_HX_REQUEST="true")
    assert "<form" not in viewer.content.decode()  # held by another operator: not for this one
    done = operator_client.post(
        reverse("dashboard:review_resolve", args=[items[0].pk]),
        {
            "resolution": "abort",
            "note": "the source is gone",
            "apply_to_group": "on",
            "next": QUEUE + "?view=groups",
        },
        follow=True,
    )
    assert done.redirect_chain[-1][0] == QUEUE + "?view=groups"
    assert "Resolved and 3 more with the same signature (abort)" in done.content.decode()
    states = [ReviewItem.objects.get(pk=i.pk).state for i in items]
    assert states == ["resolved"] * 4 + ["claimed"]


def test_a_resolution_that_cannot_work_is_shown_disabled_and_refused(db, operator_client):
    # Reported by an agent, from a source no capability lists: nothing to switch to.
    item = review(source="vendor_api")
    operator_client.post(reverse("dashboard:review_claim", args=[item.pk]))
    html = operator_client.get(item_url(item)).content.decode()
    assert 'value="switch_source" disabled' in html
    assert "Not possible: <bdi>No registered capability lists vendor_api" in html
    response = operator_client.post(
        reverse("dashboard:review_resolve", args=[item.pk]),
        {"resolution": "switch_source", "note": "try another"},
        **HX,
    )
    assert "“switch source” cannot work here" in response.content.decode()
    assert ReviewItem.objects.get(pk=item.pk).state == "claimed"


def test_each_resolution_is_written_on_the_workflows_timeline(db, operator, operator_client):
    wf = make_workflow(capability="news")
    run = make_failure("auth_failure", workflow=wf, topic="film", decision="escalate")
    item = make_review(run)
    do_resolve_review(
        item, operator, "switch_source", channel=Channel.DASHBOARD, note="wire has it"
    )
    ReviewItem.objects.filter(pk=item.pk).update(outcome="Switched from news_api to news_wire.")
    html = operator_client.get(reverse("dashboard:workflow_detail", args=[wf.pk])).content.decode()
    timeline = html[html.index('id="timeline"') :]
    assert f'data-review-resolved="{item.pk}"' in timeline
    resolved = timeline[timeline.index(f'data-review-resolved="{item.pk}"') :]
    assert "switch source" in resolved and "olga" in resolved and "wire has it" in resolved
    assert "Switched from news_api to news_wire." in resolved


def test_resolution_labels_are_lowercase_and_from_the_enum(db):
    labels = dict(ReviewItem.Resolution.choices)
    assert labels == {
        "retry": "retry",
        "retry_edited": "retry with edited input",
        "switch_source": "switch source",
        "accept_partial": "accept partial results",
        "abort": "abort",
        "reenable_source": "re-enable the source",
        "dismiss": "dismiss",
    }


def test_readers_see_the_queue_but_no_decision(outsider, db):
    from django.contrib.auth.models import Permission

    outsider.user_permissions.add(Permission.objects.get(codename="view_reviewitem"))
    item = review()
    client = signed_in(outsider)
    assert "data-claim-url" not in client.get(QUEUE).content.decode()
    assert "Claim</button>" not in client.get(item_url(item)).content.decode()
    assert client.post(reverse("dashboard:review_claim", args=[item.pk])).status_code == 403
    assert Run.objects.count() == 1


def test_a_group_with_a_folded_failure_group_links_to_its_page(db, operator_client):
    from insights.models import FailureGroup

    item = review("timeout", "a_api")
    now = timezone.now()
    group = FailureGroup.objects.create(
        signature=item.signature,
        source="a_api",
        failure_type="timeout",
        pattern="timeout x",
        first_seen=now,
        last_seen=now,
        count=1,
    )
    html = operator_client.get(QUEUE + "?view=groups").content.decode()
    assert f'href="/groups/{group.pk}/">failure group #{group.pk}</a>' in html
    assert operator_client.get(f"/groups/{group.pk}/").status_code == 200
