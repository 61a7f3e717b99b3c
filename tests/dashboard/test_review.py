"""Review queue: oldest first with the run inline, claim then resolve, exactly one resolution."""

from __future__ import annotations

import pytest
from django.urls import reverse

from orchestrator.models import ApiToken, AuditEntry, ProviderOverride, ReviewItem

from .conftest import HOSTILE_SCRIPT, ago, make_failure, make_review, make_workflow, signed_in

QUEUE = reverse("dashboard:review_queue")
HX = {"HTTP_HX_REQUEST": "true"}


def claim(client, item, **extra):
    return client.post(reverse("dashboard:review_claim", args=[item.pk]), **extra)


def resolve(client, item, **data):
    data.setdefault("resolution", "accept_partial")
    data.setdefault("note", "good enough")
    return client.post(reverse("dashboard:review_resolve", args=[item.pk]), data, **HX)


def test_open_items_oldest_first_each_with_its_own_page(operator_client):
    newer = make_review(make_failure("auth_failure", detail="401 from news_api"))
    older = make_review(
        make_failure("unclassified", detail=HOSTILE_SCRIPT), created_at=ago(hours=5)
    )
    response = operator_client.get(QUEUE)
    assert [i.pk for i in response.context["page"].rows] == [older.pk, newer.pk]
    html = response.content.decode()
    assert "waiting 5 h" in html and reverse("dashboard:review_item", args=[older.pk]) in html
    page = operator_client.get(reverse("dashboard:review_item", args=[older.pk]))
    html = page.content.decode()
    assert "&lt;script&gt;" in html and "<script>alert" not in html  # the envelope, escaped
    assert page.context["newer"] == newer.pk and page.context["older"] is None


def test_claim_then_resolve_feeds_the_coordinator(operator, operator_client):
    item = make_review()
    response = claim(operator_client, item, **HX)
    html = response.content.decode()
    assert "<html" not in html and "Claimed" in html and 'name="resolution"' in html
    item.refresh_from_db()
    assert item.state == "claimed" and item.assignee == operator
    response = resolve(operator_client, item, resolution="abort", note="source is dead")
    assert "Resolved" in response.content.decode()
    item.refresh_from_db()
    assert (item.state, item.resolution, item.note, item.resolved_by) == (
        "resolved",
        "abort",
        "source is dead",
        operator,
    )
    assert AuditEntry.objects.filter(action="review.resolve", object_id=str(item.pk)).exists()


def test_a_claim_is_audited_once_with_who_and_when(operator, policy_editor):
    item = make_review()
    first, second = signed_in(operator), signed_in(policy_editor)
    claim(first, item, **HX)
    claim(first, item, **HX)  # a double click: still theirs, nothing changed
    taken = claim(second, item, **HX)
    assert "Already claimed by olga" in taken.content.decode()
    entry = AuditEntry.objects.get(action="review.claim", object_id=str(item.pk))
    assert (entry.actor, entry.actor_label, entry.object_type) == (operator, "olga", "reviewitem")
    assert entry.before == {"state": "open", "assignee": None}
    assert entry.after == {"state": "claimed", "assignee": operator.pk}
    item.refresh_from_db()
    assert entry.created_at >= item.claimed_at


def test_a_second_resolution_shows_a_message_not_an_error(operator, policy_editor):
    item = make_review()
    first, second = signed_in(operator), signed_in(policy_editor)
    claim(first, item)
    resolve(first, item, resolution="abort")
    # A stale form from a second operator (who also had it open) arrives late.
    response = resolve(second, item, resolution="retry")
    assert response.status_code == 200
    assert "Already resolved by olga" in response.content.decode()
    item.refresh_from_db()
    assert item.resolution == "abort"


def test_the_same_operator_double_submitting_resolves_once(operator_client):
    item = make_review()
    claim(operator_client, item)
    resolve(operator_client, item)
    again = resolve(operator_client, item)
    assert "Already resolved" in again.content.decode()
    assert AuditEntry.objects.filter(action="review.resolve").count() == 1


def test_an_item_claimed_by_someone_else_cannot_be_resolved_by_me(operator, policy_editor):
    item = make_review()
    claim(signed_in(policy_editor), item)
    response = resolve(signed_in(operator), item)
    assert "Already claimed by paul" in response.content.decode()
    item.refresh_from_db()
    assert item.state == "claimed"
    response = claim(signed_in(operator), item, **HX)
    assert "Already claimed by paul" in response.content.decode()


def test_retry_with_edited_input_needs_valid_json(operator_client):
    item = make_review()
    claim(operator_client, item)
    response = resolve(operator_client, item, resolution="retry_edited", edited_input="{oops")
    html = response.content.decode()
    assert "Not valid JSON" in html
    # The input to fix stays open (the script opens it when the choice is made).
    assert '<details class="edited" data-opens-with="retry_edited" open>' in html
    assert ReviewItem.objects.get(pk=item.pk).state == "claimed"
    resolve(operator_client, item, resolution="retry_edited", edited_input='{"query": "narrower"}')
    item.refresh_from_db()
    assert item.edited_input == {"query": "narrower"}


def test_the_edited_input_starts_closed_for_the_other_resolutions(operator_client):
    item = make_review()
    html = claim(operator_client, item, **HX).content.decode()
    assert '<details class="edited" data-opens-with="retry_edited" >' in html
    html = resolve(operator_client, item, resolution="retry", note="").content.decode()
    assert 'data-opens-with="retry_edited" open' not in html


def test_the_banner_says_who_applies_the_resolution(operator_client):
    built_in = make_review(make_failure("timeout", workflow=make_workflow(capability="news")))
    claim(operator_client, built_in)
    html = resolve(operator_client, built_in, resolution="abort").content.decode()
    assert "Resolved (abort): the coordinator continues." in html
    agents = make_review(make_failure("timeout"))
    claim(operator_client, agents)
    html = resolve(operator_client, agents, resolution="abort").content.decode()
    assert "the coordinator continues" not in html
    assert (
        "Resolved (abort): recorded for the agent&#x27;s own coordinator, which applies it once "
        f"it picks it up (by GET /api/v1/reviews/{agents.pk})." in html
    )
    token, _ = ApiToken.issue("hooked-agent")
    token.set_callback("https://agent.example/hook")
    hooked = make_review(make_failure("timeout", token=token))
    claim(operator_client, hooked)
    html = resolve(operator_client, hooked, resolution="abort").content.decode()
    assert f"(by its webhook or GET /api/v1/reviews/{hooked.pk})" in html


def test_unclassified_items_can_be_reclassified_and_saved_as_override(operator_client):
    run = make_failure("unclassified", provider_code="WeirdThrottle", source="news_api")
    item = make_review(run)
    claim(operator_client, item)
    html = operator_client.get(reverse("dashboard:review_item", args=[item.pk])).content.decode()
    assert "Save as a provider override" in html
    resolve(
        operator_client, item, resolution="retry", failure_type="rate_limited", save_override="on"
    )
    item.refresh_from_db()
    assert item.failure_type == "rate_limited"
    override = ProviderOverride.objects.get(match_value="WeirdThrottle")
    assert override.failure_type == "rate_limited" and override.provider == "news_api"


def test_apply_to_all_with_the_same_signature(operator_client):
    items = [make_review(signature="sig-1") for _ in range(3)]
    other = make_review(signature="sig-2")
    claim(operator_client, items[0])
    page = reverse("dashboard:review_item", args=[items[0].pk])
    html = operator_client.get(page).content.decode()
    assert "Apply to all 3 open items with the same signature" in html
    response = resolve(operator_client, items[0], apply_to_group="on")
    assert "and 2 more" in response.content.decode()
    assert ReviewItem.objects.filter(signature="sig-1", state="resolved").count() == 3
    assert ReviewItem.objects.get(pk=other.pk).state == "open"


def test_resolved_items_keep_who_when_why(operator_client):
    item = make_review()
    claim(operator_client, item)
    resolve(operator_client, item, note="provider confirmed outage")
    listed = operator_client.get(QUEUE + "?state=resolved")
    assert [i.pk for i in listed.context["page"].rows] == [item.pk]
    assert "olga" in listed.content.decode()
    html = operator_client.get(reverse("dashboard:review_item", args=[item.pk])).content.decode()
    assert "provider confirmed outage" in html and "olga" in html


def test_plain_form_posts_work_without_htmx(operator_client):
    item = make_review()
    response = claim(operator_client, item, follow=True)
    assert response.redirect_chain[-1][0] == reverse("dashboard:review_item", args=[item.pk])
    assert "Claimed" in response.content.decode()


def test_readers_without_review_permission_see_no_buttons(outsider, db):
    from django.contrib.auth.models import Permission

    outsider.user_permissions.add(Permission.objects.get(codename="view_reviewitem"))
    make_review()
    html = signed_in(outsider).get(QUEUE).content.decode()
    assert "Claim</button>" not in html and "resolving needs the review permission" in html


def test_empty_queue_explains_itself(operator_client):
    assert "Nothing is waiting for a human" in operator_client.get(QUEUE).content.decode()


@pytest.mark.parametrize("user", ["operator", "policy_editor"])
def test_nav_bar_shows_the_open_review_count(db, request, user):
    make_review()
    make_review()
    html = signed_in(request.getfixturevalue(user)).get(QUEUE).content.decode()
    assert 'id="nav-review-count">2<' in html


def test_the_queues_facets_and_groups_escape_what_agents_sent(operator_client):
    """The facets and the signature groups are built as strings in one tag each: an agent's
    source, agent name and reason reach them escaped, and a facet's link keeps its query."""
    from .conftest import HOSTILE_IMG

    for _ in range(2):
        run = make_failure("timeout", source=HOSTILE_SCRIPT, agent=HOSTILE_IMG)
        make_review(run, reason=HOSTILE_SCRIPT, source=run.source, agent=run.agent, signature="s1")
    for view in ("", "?view=groups"):
        html = operator_client.get(QUEUE + view).content.decode()
        assert "<script>alert" not in html and "<img src=x" not in html, view
        assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in html, view
        assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html, view
    assert 'data-facet="source"' in html and "source=%3Cscript%3E" in html
    assert 'class="card sig-group" data-signature="s1"' in html and "oldest waiting" in html


def test_an_open_item_can_be_resolved_without_claiming_it_first(operator, operator_client):
    item = make_review(deadline_at=ago(hours=-4))
    html = operator_client.get(reverse("dashboard:review_item", args=[item.pk])).content.decode()
    # The form is there before any claim, and the page says what claiming is for.
    assert 'name="resolution"' in html and "Claim" in html
    assert "resolving claims it for you" in html
    # The deadline says what happens at it, not a bare "fallback at".
    assert "if no one resolves it by" in html and "fallback applies: accept partial" in html
    response = resolve(operator_client, item, resolution="abort", note="dead source")
    assert "Resolved" in response.content.decode()
    item.refresh_from_db()
    assert (item.state, item.resolved_by, item.assignee) == ("resolved", operator, operator)
    entry = AuditEntry.objects.get(action="review.resolve", object_id=str(item.pk))
    assert entry.before["state"] == "open" and entry.before["assignee"] is None
    assert entry.after["assignee"] == operator.pk  # claimed by the resolution, audited
