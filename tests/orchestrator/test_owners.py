"""Owners of review items: rules assign a new item to an owner group, an unclaimed item is
reminded at its group's age and moves up the chain after another, each step audited and sent
as an event to the group (a webhook delivery: chat and e-mail deliver the same events next)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from orchestrator.coordination import owners
from orchestrator.coordination.actions import do_claim_review
from orchestrator.models import (
    AuditEntry,
    OutboxMessage,
    OwnerGroup,
    OwnerRule,
    Project,
    ReviewItem,
    Run,
    WebhookDelivery,
)
from orchestrator.vocabulary import Channel

from .test_coordinator import sim  # noqa: F401  (the fixture)

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
Event = WebhookDelivery.Event


def item_of(source: str = "news_api", agent: str = "crawler", failure_type: str = "auth_failure"):
    run = Run.objects.create(
        agent=agent, source=source, status=Run.Status.ESCALATED, failure_type=failure_type
    )
    return ReviewItem.objects.create(
        run=run, reason="why", failure_type=failure_type, created_at=T0
    )


@pytest.fixture
def chain(db):
    """Data on call, then the platform team, then the heads; rules for news_api's auth failures
    and, last, anything at all."""
    heads = OwnerGroup.objects.create(
        name="heads", remind_after=600, move_after=600, url="https://hooks.example/heads"
    )
    platform = OwnerGroup.objects.create(
        name="platform",
        remind_after=1800,
        move_after=3600,
        next_group=heads,
        url="https://hooks.example/platform",
    )
    oncall = OwnerGroup.objects.create(
        name="data on call",
        remind_after=900,
        move_after=1800,
        next_group=platform,
        url="https://hooks.example/oncall",
    )
    OwnerRule.objects.create(position=10, owner_group=oncall, source="news_api")
    OwnerRule.objects.create(position=20, owner_group=platform, failure_type="auth_failure")
    OwnerRule.objects.create(position=90, owner_group=heads)
    return oncall, platform, heads


def events(item: ReviewItem) -> list[tuple[str, str]]:
    rows = WebhookDelivery.objects.filter(payload__item__id=item.pk).order_by("id")
    return [(d.event, d.payload["owner_group"]) for d in rows]


def test_the_first_matching_rule_by_position_assigns_the_owner(chain):
    oncall, platform, heads = chain
    assert owners.owner_for(item_of(source="news_api")) == oncall
    assert owners.owner_for(item_of(source="news_wire")) == platform
    assert owners.owner_for(item_of(source="news_wire", failure_type="timeout")) == heads
    # Position decides, not the order of creation; a disabled rule is skipped.
    OwnerRule.objects.filter(owner_group=platform).update(position=5)
    assert owners.owner_for(item_of(source="news_api")) == platform
    OwnerRule.objects.filter(owner_group=platform).update(enabled=False)
    assert owners.owner_for(item_of(source="news_api")) == oncall
    # Every field a rule sets must match: project and agent too.
    other = Project.objects.create(slug="labs", name="Labs")
    OwnerRule.objects.create(position=1, owner_group=heads, project=other, agent="crawler")
    assert owners.owner_for(item_of(source="news_api")) == oncall  # the default project's
    labs = item_of(source="news_api")
    labs.project = other
    assert owners.owner_for(labs) == heads
    OwnerRule.objects.all().delete()
    assert owners.owner_for(item_of()) is None


def test_an_escalation_is_assigned_audited_and_announced(sim, chain):  # noqa: F811
    oncall, _, _ = chain
    sim.start(["film"], {"news_api:film": "auth", "news_wire:film": "missing"})
    sim.drive()
    item = ReviewItem.objects.get()
    assert (item.owner_group, item.owned_since, item.reminded_at) == (oncall, item.created_at, None)
    entry = AuditEntry.objects.get(action="review.assign")
    assert (entry.object_id, entry.actor_label, entry.channel) == (str(item.pk), "system", "system")
    assert entry.after == {"owner_group": "data on call"}
    delivery = WebhookDelivery.objects.get()
    assert (delivery.event, delivery.url) == (Event.REVIEW_OPENED, "https://hooks.example/oncall")
    assert delivery.payload["item"]["path"] == reverse("dashboard:review_item", args=[item.pk])
    assert delivery.payload["item"]["source"] == "news_api" and delivery.sealed_secret
    assert delivery.state == WebhookDelivery.State.PENDING


def test_an_unclaimed_item_is_reminded_at_its_age_then_moves_up_the_chain(chain):
    oncall, platform, heads = chain
    item = item_of()
    owners.assign(item, T0)
    assert owners.remind_and_move(T0 + timedelta(seconds=899)) == 0
    assert owners.remind_and_move(T0 + timedelta(seconds=900)) == 1
    assert owners.remind_and_move(T0 + timedelta(seconds=901)) == 0  # reminded once
    item.refresh_from_db()
    reminded = T0 + timedelta(seconds=900)
    assert (item.owner_group, item.reminded_at) == (oncall, reminded)
    remind = AuditEntry.objects.get(action="review.remind")
    assert remind.note == "Unclaimed for 15 min: data on call reminded."
    # Another move_after (1800 s) later, unclaimed still: the next group has it.
    assert owners.remind_and_move(reminded + timedelta(seconds=1799)) == 0
    moved_at = reminded + timedelta(seconds=1800)
    assert owners.remind_and_move(moved_at) == 1
    item.refresh_from_db()
    assert (item.owner_group, item.owned_since, item.reminded_at) == (platform, moved_at, None)
    move = AuditEntry.objects.get(action="review.move")
    assert (move.before, move.after) == (
        {"owner_group": "data on call"},
        {"owner_group": "platform"},
    )
    assert move.note == "Unclaimed 30 min after data on call's reminder: moved to platform."
    # The new group's own ages apply from its turn: reminded at 30 min, moved an hour later.
    owners.remind_and_move(moved_at + timedelta(seconds=1800))
    owners.remind_and_move(moved_at + timedelta(seconds=1800 + 3600))
    item.refresh_from_db()
    assert item.owner_group == heads
    # The end of the chain is reminded once and stays.
    last = item.owned_since
    assert owners.remind_and_move(last + timedelta(seconds=600)) == 1
    assert owners.remind_and_move(last + timedelta(days=3)) == 0
    assert events(item) == [
        (Event.REVIEW_OPENED, "data on call"),
        (Event.REVIEW_REMINDER, "data on call"),
        (Event.REVIEW_MOVED, "platform"),
        (Event.REVIEW_REMINDER, "platform"),
        (Event.REVIEW_MOVED, "heads"),
        (Event.REVIEW_REMINDER, "heads"),
    ]
    moved = WebhookDelivery.objects.filter(event=Event.REVIEW_MOVED).order_by("id").first()
    assert moved.payload["previous_owner_group"] == "data on call"
    assert moved.url == "https://hooks.example/platform"
    actions = list(
        AuditEntry.objects.filter(object_id=str(item.pk))
        .order_by("created_at", "id")
        .values_list("action", flat=True)
    )
    assert actions == ["review.assign", *["review.remind", "review.move"] * 2, "review.remind"]
    assert [e.action for e in owners.events_of(item)] == actions


def test_a_claimed_item_is_neither_reminded_nor_moved(chain, operator):
    item = item_of()
    owners.assign(item, T0)
    do_claim_review(item, operator, channel=Channel.DASHBOARD)
    assert owners.remind_and_move(T0 + timedelta(days=1)) == 0
    item.refresh_from_db()
    assert item.reminded_at is None and item.owner_group.name == "data on call"


def test_an_event_is_sent_by_the_outbox_after_the_commit(chain):
    item = item_of()
    owners.assign(item, T0)
    delivery = WebhookDelivery.objects.get()
    assert (
        OutboxMessage.objects.get(args=[delivery.pk]).task == "orchestrator.tasks.deliver_webhook"
    )


def test_a_group_without_an_address_is_audited_only(chain):
    OwnerGroup.objects.update(url="")
    item = item_of()
    owners.assign(item, T0)
    owners.remind_and_move(T0 + timedelta(hours=1))
    assert not WebhookDelivery.objects.exists()
    assert AuditEntry.objects.filter(action__in=["review.assign", "review.remind"]).count() == 2


def test_the_beat_runs_the_pass_every_minute(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["review-owner-reminders"]
    assert entry["task"] == "orchestrator.tasks.remind_review_owners"
    assert entry["schedule"] == 60.0


def test_owner_groups_and_rules_are_edited_in_the_admin_audited(admin_client, admin_user, chain):
    oncall, platform, heads = chain
    add = reverse("admin:orchestrator_ownerrule_add")
    assert admin_client.get(add).status_code == 200
    form = {"position": "5", "owner_group": str(heads.pk), "source": "news_wire", "agent": ""}
    form |= {"failure_type": "timeout", "enabled": "on", "project": ""}
    assert admin_client.post(add, form).status_code == 302
    rule = OwnerRule.objects.get(position=5)
    assert owners.owner_for(item_of(source="news_wire", failure_type="timeout")) == heads
    entry = AuditEntry.objects.get(action="ownerrule.create")
    assert entry.actor == admin_user and entry.after["source"] == "news_wire"
    change = reverse("admin:orchestrator_ownergroup_change", args=[oncall.pk])
    group = {"name": "data on call", "remind_after": "120", "move_after": "300"}
    group |= {"next_group": str(platform.pk), "url": "", "members": ""}
    assert admin_client.post(change, group).status_code == 302
    oncall.refresh_from_db()
    assert oncall.remind_after == 120
    entry = AuditEntry.objects.get(action="ownergroup.change")
    assert entry.before["remind_after"] == "900" and entry.after["remind_after"] == "120"
    # A chain that comes back to a group is refused.
    loop = {"name": "heads", "remind_after": "600", "move_after": "600"}
    loop |= {"next_group": str(oncall.pk), "url": "", "members": ""}
    change_heads = reverse("admin:orchestrator_ownergroup_change", args=[heads.pk])
    assert admin_client.post(change_heads, loop).status_code == 200
    heads.refresh_from_db()
    assert heads.next_group is None
    assert rule.pk
