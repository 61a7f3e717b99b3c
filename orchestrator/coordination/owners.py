"""Review items' owners: a new item goes to the owner group of the first rule that matches it; an
item nobody claims is reminded at its group's age and moves on to the next group of the chain
after another. Each step is audited on the item and sends its event to the group (a signed
webhook to the group's address, when it has one: chat and e-mail deliver the same events next).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.urls import reverse

from orchestrator.coordination import clock, dispatch
from orchestrator.models import AuditEntry, OwnerGroup, OwnerRule, ReviewItem, WebhookDelivery
from orchestrator.vocabulary import Channel

Event = WebhookDelivery.Event
# The items one pass of the beat task looks at, at most.
PASS_BATCH = 500


def owner_for(item: ReviewItem) -> OwnerGroup | None:
    """The owner group of the first enabled rule, by position, that matches `item`."""
    for rule in OwnerRule.objects.in_order().select_related("owner_group"):
        if rule.matches(item):
            return rule.owner_group
    return None


def assign(item: ReviewItem, now: datetime | None = None) -> OwnerGroup | None:
    """Give a new item to its owner group (if a rule matches), audited, with the "new item"
    event; inside the caller's transaction, which opened the item."""
    group = owner_for(item)
    if group is None:
        return None
    now = now or clock.now()
    ReviewItem.objects.filter(pk=item.pk).update(owner_group=group, owned_since=now)
    item.owner_group, item.owned_since = group, now
    AuditEntry.record(
        actor="system",
        action="review.assign",
        obj=item,
        before={"owner_group": None},
        after={"owner_group": group.name},
        channel=Channel.SYSTEM,
    )
    send_event(Event.REVIEW_OPENED, item, group, now)
    return group


def remind_and_move(now: datetime | None = None) -> int:
    """Remind the owner groups of the items unclaimed past their reminder age, and move on to
    the next group those unclaimed `move_after` seconds after their reminder; return how many
    items were reminded or moved."""
    now = now or clock.now()
    done = 0
    items = ReviewItem.objects.unclaimed_owned().select_related("owner_group")
    for item in items.order_by("owned_since", "id")[:PASS_BATCH]:
        group = item.owner_group
        if item.reminded_at is None:
            if item.owned_since + timedelta(seconds=group.remind_after) <= now:
                done += _remind(item, group, now)
        elif group.next_group_id and item.reminded_at + timedelta(seconds=group.move_after) <= now:
            done += _move(item, group, now)
    return done


def _remind(item: ReviewItem, group: OwnerGroup, now: datetime) -> int:
    with transaction.atomic():
        # Conditional: a claim or another pass since the read leaves it alone.
        if (
            not _unclaimed_with(item, group)
            .filter(reminded_at__isnull=True)
            .update(reminded_at=now)
        ):
            return 0
        item.reminded_at = now
        AuditEntry.record(
            actor="system",
            action="review.remind",
            obj=item,
            before={"reminded_at": None},
            after={"owner_group": group.name, "reminded_at": now.isoformat()},
            note=f"Unclaimed for {_age(now - item.owned_since)}: {group.name} reminded.",
            channel=Channel.SYSTEM,
        )
        send_event(Event.REVIEW_REMINDER, item, group, now)
    return 1


def _move(item: ReviewItem, group: OwnerGroup, now: datetime) -> int:
    target = group.next_group
    with transaction.atomic():
        moved = (
            _unclaimed_with(item, group)
            .filter(reminded_at=item.reminded_at)
            .update(owner_group=target, owned_since=now, reminded_at=None)
        )
        if not moved:
            return 0
        waited = now - item.reminded_at
        item.owner_group, item.owned_since, item.reminded_at = target, now, None
        AuditEntry.record(
            actor="system",
            action="review.move",
            obj=item,
            before={"owner_group": group.name},
            after={"owner_group": target.name},
            note=f"Unclaimed {_age(waited)} after {group.name}'s reminder: moved to {target.name}.",
            channel=Channel.SYSTEM,
        )
        send_event(Event.REVIEW_MOVED, item, target, now, previous=group)
    return 1


def _unclaimed_with(item: ReviewItem, group: OwnerGroup) -> Any:
    return ReviewItem.objects.filter(pk=item.pk, state=ReviewItem.State.OPEN, owner_group=group)


def _age(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"


def event_payload(
    event: str, item: ReviewItem, group: OwnerGroup, now: datetime, previous: OwnerGroup | None
) -> dict[str, Any]:
    """What an owner group is told: the event, the item's facts and its page (a path: the
    deliverer makes it whole with the site's address)."""
    return {
        "event": event,
        "at": now.isoformat(),
        "owner_group": group.name,
        "previous_owner_group": previous.name if previous else None,
        "item": {
            "id": item.pk,
            "path": reverse("dashboard:review_item", args=[item.pk]),
            "reason": item.reason[:500],
            "failure_type": item.failure_type,
            "source": item.source,
            "agent": item.agent,
            "project": item.project_id,
            "blocking": item.blocking,
            "created_at": item.created_at.isoformat(),
        },
    }


def send_event(
    event: str,
    item: ReviewItem,
    group: OwnerGroup,
    now: datetime,
    previous: OwnerGroup | None = None,
) -> WebhookDelivery | None:
    """Queue `event` to `group`'s address, if it has one, in the caller's transaction."""
    if not group.url:
        return None
    payload = event_payload(event, item, group, now, previous)
    return dispatch.queue_webhook(event, group.url, payload, group.sealed_signing_secret)


def events_of(item: ReviewItem) -> list[AuditEntry]:
    """The item's owner history as its page shows it: assigned, reminded, moved, oldest first."""
    return list(
        AuditEntry.objects.filter(
            object_type="reviewitem",
            object_id=str(item.pk),
            action__in=("review.assign", "review.remind", "review.move"),
        ).order_by("created_at", "id")
    )
