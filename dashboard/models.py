"""Dashboard-owned data: hourly run rollups that feed the tiles and /metrics, and webhook alerts.

Rollups are folded in batches by a periodic task (`dashboard.tasks.refresh_rollups`), never per
insert: a counter row updated on every run would halve ingest (see the brief).
"""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from orchestrator.models import FailureType


class RunRollup(models.Model):
    """Counts of the runs created in one hour, per status, failure type and source."""

    hour = models.DateTimeField(help_text="Start of the hour (UTC) the runs were created in")
    status = models.CharField(max_length=12)
    failure_type = models.CharField(max_length=20, blank=True, help_text="Blank: no failure")
    source = models.CharField(max_length=100)
    count = models.PositiveIntegerField(default=0)
    # failed runs that kept partial results, and how many partial items they kept
    partial_runs = models.PositiveIntegerField(default=0)
    partial_items = models.PositiveBigIntegerField(default=0)
    # succeeded with zero results: a valid empty answer, not a failure
    empty_runs = models.PositiveIntegerField(default=0)
    # runs that are retries (retry_of set); with status=failed they are wasted retries
    retries = models.PositiveIntegerField(default=0)
    # retries started before their due time (before the provider's Retry-After): should be 0
    early_retries = models.PositiveIntegerField(default=0)
    # retries on another source than the first attempt (a switch_source decision)
    switched = models.PositiveIntegerField(default=0)
    # failures the coordinator did not retry although a blind retry-everything policy would have
    avoided_retries = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "status", "failure_type", "source"], name="rollup_unique_key"
            )
        ]
        # The unique constraint's index (hour first) serves every window query of the tiles.

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.status} {self.failure_type} {self.source}"


class AlertRule(models.Model):
    """A threshold that, once crossed, posts a JSON webhook (re-armed after a cool-down)."""

    class Kind(models.TextChoices):
        FAILURE_RATE = "failure_rate", "failure rate of a type over a window"
        REVIEW_AGE = "review_age", "age of the oldest open review item"

    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    failure_type = models.CharField(
        max_length=20, choices=FailureType.choices, blank=True, help_text="For failure_rate"
    )
    window_minutes = models.PositiveIntegerField(default=60, validators=[MinValueValidator(1)])
    threshold = models.FloatField(
        validators=[MinValueValidator(0)],
        help_text="failure_rate: a share between 0 and 1; review_age: seconds",
    )
    url = models.URLField(max_length=500)
    enabled = models.BooleanField(default=True)
    cooldown_minutes = models.PositiveIntegerField(default=60)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind} ≥ {self.threshold})"


class AlertDelivery(models.Model):
    """One webhook post of one alert, with what the receiver answered."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="deliveries")
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    response_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "alert deliveries"

    def __str__(self) -> str:
        return f"delivery {self.pk} of {self.rule_id}: {self.status}"
