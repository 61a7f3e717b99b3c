"""Who is asked to decide a review item: owner groups, each with its reminder and the next group
in its chain, and the ordered rules that assign a new item to one (edited in the admin). The
assigning, reminding and moving on, audited, are `orchestrator.coordination.owners`."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from orchestrator.models.runs import FailureType
from orchestrator.models.tokens import new_signing_secret


class OwnerGroup(models.Model):
    """The people asked to decide the items a rule gives them: the members of a Django auth group
    (optional: a group may be only a name and an address), reminded once an item waits unclaimed
    `remind_after` seconds, and the item moves on to `next_group` after `move_after` more."""

    name = models.CharField(max_length=100, unique=True)
    members = models.ForeignKey(
        Group,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The Django auth group whose users this owner group is",
    )
    remind_after = models.PositiveIntegerField(
        default=3600,
        validators=[MinValueValidator(1)],
        help_text="Seconds an item waits unclaimed with this group before it is reminded",
    )
    move_after = models.PositiveIntegerField(
        default=4 * 3600,
        validators=[MinValueValidator(1)],
        help_text="Seconds after the reminder before an unclaimed item moves to the next group",
    )
    next_group = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Where an item nobody claimed goes next; blank: it stays, reminded once",
    )
    url = models.URLField(
        max_length=500,
        blank=True,
        help_text="Where this group's review events (new item, reminder, moved up) are posted, "
        "signed, as webhooks; blank: recorded in the audit log only",
    )
    sealed_signing_secret = models.TextField(blank=True, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.url and not self.sealed_signing_secret:
            self.sealed_signing_secret = new_signing_secret()[1]
        super().save(*args, **kwargs)

    def clean(self) -> None:
        seen, group = {self.pk}, self.next_group
        while group is not None:
            if group.pk in seen:
                raise ValidationError({"next_group": "The chain comes back to this group."})
            seen.add(group.pk)
            group = group.next_group


class OwnerRuleQuerySet(models.QuerySet):
    def in_order(self) -> OwnerRuleQuerySet:
        return self.filter(enabled=True).order_by("position", "id")


class OwnerRule(models.Model):
    """Gives a new review item to an owner group when every field it sets matches the item (a
    blank field matches anything); the first matching rule by position wins."""

    position = models.PositiveIntegerField(default=100, help_text="Lower is tried first")
    owner_group = models.ForeignKey(OwnerGroup, on_delete=models.CASCADE, related_name="rules")
    project = models.ForeignKey(
        "Project", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    source = models.CharField(max_length=100, blank=True)
    agent = models.CharField(max_length=100, blank=True)
    failure_type = models.CharField(max_length=20, choices=FailureType.choices, blank=True)
    enabled = models.BooleanField(default=True)

    objects = OwnerRuleQuerySet.as_manager()

    class Meta:
        ordering = ["position", "id"]

    def __str__(self) -> str:
        facets = [
            f"{name}={value}"
            for name, value in (
                ("project", self.project.slug if self.project_id else ""),
                ("source", self.source),
                ("agent", self.agent),
                ("failure type", self.failure_type),
            )
            if value
        ]
        return f"{self.position}: {', '.join(facets) or 'any item'} → {self.owner_group}"

    def matches(self, item: Any) -> bool:
        """Whether every field this rule sets equals the item's."""
        return (
            (self.project_id is None or self.project_id == item.project_id)
            and (not self.source or self.source == item.source)
            and (not self.agent or self.agent == item.agent)
            and (not self.failure_type or self.failure_type == item.failure_type)
        )
