"""GET /reviews?all_tokens=true without read:all: the items of the token's runs and of the
workflows it started, read apart and merged, each once, in keyset pages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.db.models import Q

from orchestrator.models import ApiToken, ReviewItem, Run, Workflow

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def test_a_tokens_items_and_its_workflows_items_are_listed_once_each_in_order(client, db):
    me, secret = ApiToken.issue("me")
    them, _ = ApiToken.issue("them")
    mine = Workflow.objects.create(name="mine", token=me)
    theirs = Workflow.objects.create(name="theirs", token=them)
    ways = [(me, None), (me, mine), (them, mine), (them, theirs), (them, None)]
    for i in range(20):
        token, workflow = ways[i % 5]
        run = Run.objects.create(
            agent="a", source="s", token=token, workflow=workflow, status=Run.Status.ESCALATED
        )
        # Equal times in threes, across the ways an item is the token's own.
        when = T0 + timedelta(seconds=i // 3)
        ReviewItem.objects.create(
            run=run, token=token, workflow=workflow, reason="r", created_at=when
        )
    own = ReviewItem.objects.filter(Q(token=me) | Q(workflow=mine)).order_by("created_at", "id")
    expected = list(own.values_list("pk", flat=True))
    assert len(expected) == 12
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    for limit in (1, 5, 12, 50):
        seen, cursor = [], None
        while True:
            params = {"all_tokens": "true", "limit": limit} | ({"cursor": cursor} if cursor else {})
            body = client.get("/api/v1/reviews", params, **headers).json()
            seen += [item["id"] for item in body["items"]]
            if (cursor := body["next_cursor"]) is None:
                break
        assert seen == expected, limit
    reported = client.get("/api/v1/reviews", {"limit": 50}, **headers).json()["items"]
    assert [item["id"] for item in reported] == list(
        own.filter(token=me).values_list("pk", flat=True)
    )
