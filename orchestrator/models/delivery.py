"""What leaves the process: the outbox of Celery tasks to send, and the outbound webhooks (review
resolutions, fired alerts) with each attempt."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.db import IntegrityError, models, transaction
from django.db.models import F, Q
from django.utils import timezone

from orchestrator.models.review import ReviewItem
from orchestrator.models.tokens import ApiToken, open_sealed
from orchestrator.vocabulary import Delivery


class OutboxQuerySet(models.QuerySet):
    def available(self, now: datetime) -> OutboxQuerySet:
        """Messages the sweeper may (re)send now, oldest first."""
        return self.filter(available_at__lte=now).order_by("available_at", "id")


class OutboxMessage(models.Model):
    """A Celery task to send, written in the same transaction as the change it announces and
    deleted once the broker has it (a broker outage delays work, it never loses it)."""

    task = models.CharField(max_length=200)
    args = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    available_at = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0, help_text="Sends tried by the sweeper")
    last_error = models.CharField(max_length=500, blank=True)

    objects = OutboxQuerySet.as_manager()

    class Meta:
        ordering = ["available_at", "id"]
        indexes = [
            # the sweeper's "unsent and available now" (every row is unsent)
            models.Index(fields=["available_at"], name="outbox_available"),
        ]

    def __str__(self) -> str:
        return f"{self.task}{tuple(self.args)}"


class WebhookDeliveryQuerySet(models.QuerySet):
    def stalled(self, now: datetime) -> WebhookDeliveryQuerySet:
        """Pending deliveries whose attempt's lease ran out with no outcome (a killed worker)."""
        return self.filter(state=WebhookDelivery.State.PENDING, lease_until__lt=now)


class WebhookDelivery(models.Model):
    """One event posted to one URL, signed (a review's resolution, a fired alert). Every attempt
    sends its `delivery_id`, so a receiver dedupes a redelivery whose first answer we never saw;
    URL and sealed secret are copied when the event is queued, so they stay a pair."""

    class Event(models.TextChoices):
        REVIEW_RESOLVED = "review.resolved"
        ALERT_FIRED = "alert.fired"
        # To a review item's owner group (`orchestrator.coordination.owners`).
        REVIEW_OPENED = "review.opened"
        REVIEW_REMINDER = "review.reminder"
        REVIEW_MOVED = "review.moved"

    class State(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed", "given up"
        SUPERSEDED = "superseded", "picked up by an ack first"

    event = models.CharField(max_length=30, choices=Event.choices, default=Event.REVIEW_RESOLVED)
    # A review's resolution: acknowledged by a 2xx, superseded by an ack over the API.
    item = models.OneToOneField(
        ReviewItem, null=True, blank=True, on_delete=models.CASCADE, related_name="webhook"
    )
    token = models.ForeignKey(
        ApiToken, null=True, blank=True, on_delete=models.CASCADE, related_name="deliveries"
    )
    url = models.URLField(max_length=500)
    payload = models.JSONField(default=dict)
    sealed_secret = models.TextField(blank=True, editable=False)
    delivery_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # The attempt in flight holds the delivery until then; a redelivery may take over after.
    lease_until = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=200, blank=True)
    last_error = models.CharField(max_length=500, blank=True)

    objects = WebhookDeliveryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "webhook deliveries"
        indexes = [
            # the sweeper's "an attempt died with its worker" safety net
            models.Index(
                fields=["lease_until"], name="webhook_pending_lease", condition=Q(state="pending")
            ),
            # /metrics' fold of the last hours' deliveries, and the admin's list, newest first
            models.Index(fields=["created_at", "id"], name="webhook_created"),
        ]

    def __str__(self) -> str:
        return f"{self.event} to {self.url} ({self.state})"

    def signing_secret(self) -> str:
        return open_sealed(self.sealed_secret)

    @property
    def picked_up_elsewhere(self) -> bool:
        """The agent acknowledged the resolution over the API before a webhook got through."""
        return self.item is not None and self.item.is_delivered

    def begin_attempt(self, owner: str, now: datetime, until: datetime, dead: str = "") -> int:
        """Take the delivery for one attempt; return its number (0: delivered, given up, or an
        attempt alive elsewhere holds it). A holder known dead (`dead`) is taken over."""
        # An empty owner: the sweeper claimed it for a resend.
        free = Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(lease_owner__in=["", owner])
        if dead:
            free |= Q(lease_owner=dead)
        won = (
            WebhookDelivery.objects.filter(pk=self.pk, state=self.State.PENDING)
            .filter(free)
            .update(attempts=F("attempts") + 1, lease_until=until, lease_owner=owner)
        )
        self.refresh_from_db(fields=["attempts", "lease_until", "lease_owner", "state"])
        if not won:
            return 0
        WebhookAttempt.objects.create(delivery=self, number=self.attempts, started_at=now)
        return self.attempts

    def succeed(self, number: int, status_code: int, now: datetime) -> bool:
        """Record attempt `number`'s 2xx: the agent's ack. True unless an earlier attempt was
        already acked (the unique constraint's loser: the receiver had it already)."""
        try:
            with transaction.atomic():
                WebhookAttempt.objects.filter(delivery=self, number=number).update(
                    finished_at=now, status_code=status_code, acked=True
                )
        except IntegrityError:
            return False
        self._settle(self.State.DELIVERED, now, delivered_at=now, last_error="")
        if self.item is not None:
            self.item.acknowledge(Delivery.WEBHOOK, now)
        return True

    def fail(self, number: int, status_code: int | None, error: str, now: datetime) -> None:
        WebhookAttempt.objects.filter(delivery=self, number=number).update(
            finished_at=now, status_code=status_code, error=error[:500]
        )
        WebhookDelivery.objects.filter(pk=self.pk, state=self.State.PENDING).update(
            last_error=error[:500], lease_until=None, lease_owner=""
        )

    def give_up(self, now: datetime) -> None:
        self._settle(self.State.FAILED, now)

    def supersede(self, now: datetime) -> None:
        self._settle(self.State.SUPERSEDED, now)

    def _settle(self, state: str, now: datetime, **fields: Any) -> None:
        WebhookDelivery.objects.filter(pk=self.pk, state=self.State.PENDING).update(
            state=state, lease_until=None, lease_owner="", **fields
        )
        self.refresh_from_db()


class WebhookAttempt(models.Model):
    """One POST of a delivery: when, what the receiver answered, whether it counted as the ack."""

    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="tries")
    number = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    acked = models.BooleanField(default=False, help_text="Answered with a 2xx: the receiver has it")

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="webhook_attempt_number"),
            # Exactly once: a resolution never has two acked deliveries, whatever the races.
            models.UniqueConstraint(
                fields=["delivery"], condition=Q(acked=True), name="webhook_one_ack"
            ),
        ]

    def __str__(self) -> str:
        outcome = self.status_code or self.error or "no answer"
        return f"attempt {self.number} of {self.delivery_id}: {outcome}"
