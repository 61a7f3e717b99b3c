"""The audit trail: who changed what, when, with the state before and after."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.conf import settings
from django.db import models
from django.db.models import BigIntegerField, Case, Exists, OuterRef, Q, When
from django.db.models.functions import Cast
from django.utils import timezone

from orchestrator.models.projects import Project
from orchestrator.vocabulary import Channel

# The audited objects that belong to a project (their `object_type`, the model's name): an entry
# belongs to its object's project.
IN_A_PROJECT = ("run", "workflow", "reviewitem", "apitoken")
# Every project's configuration (the routing table, overrides, secret filters, prices, and the
# policy versions restoring them, a source re-enabled after its repair, who owns review items):
# its entries are every operator's, as the policies page shows.
SHARED = (
    "routingpolicy",
    "provideroverride",
    "scrubrule",
    "price",
    "policyversion",
    "sourcehealth",
    "ownergroup",
    "ownerrule",
)


def actor_label(actor: Any) -> str:
    """How the audit trail and reason sentences name who acted: a username, a token, 'system'."""
    return getattr(actor, "get_username", lambda: "")() or str(actor or "system")


class AuditEntryQuerySet(models.QuerySet):
    def in_projects(self, ids: tuple[int, ...]) -> AuditEntryQuerySet:
        """The entries of objects in the projects `ids`, and those of the shared configuration.
        A project routing row's entries name its project (the row may be gone); any other kind
        (spend budgets, failure groups, sign-in lockouts) counts every project: none here."""
        # The id read as a number only for the kinds whose ids are numbers (a lockout's is a name).
        number = Case(When(object_type__in=IN_A_PROJECT, then=Cast("object_id", BigIntegerField())))
        entries = self.annotate(object_number=number)
        condition = Q(object_type__in=SHARED)
        for name in IN_A_PROJECT:
            owned = apps.get_model("orchestrator", name).objects.filter(
                pk=OuterRef("object_number"), project_id__in=ids
            )
            condition |= Q(Exists(owned), object_type=name)
        slugs = list(Project.objects.filter(pk__in=ids).values_list("slug", flat=True))
        condition |= Q(object_type="projectpolicy") & (
            Q(after__project__in=slugs) | Q(before__project__in=slugs)
        )
        return entries.filter(condition)


class AuditEntry(models.Model):
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=150, help_text="Username, token name or 'system'")
    action = models.CharField(max_length=50)
    object_type = models.CharField(max_length=50)
    object_id = models.CharField(max_length=50)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    note = models.TextField(blank=True)
    # Blank for the changes no operator action makes (an agent's token, a sign-in lockout).
    channel = models.CharField(max_length=10, choices=Channel.choices(), blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [
            # the policies page's change history and one object's history
            models.Index(fields=["object_type", "object_id", "created_at"], name="audit_object"),
            # the admin's audit list, newest first
            models.Index(fields=["created_at"], name="audit_created"),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_label} {self.action}"

    @classmethod
    def record(
        cls,
        *,
        actor: Any,
        action: str,
        obj: models.Model,
        before: dict | None,
        after: dict | None,
        note: str = "",
        channel: str = "",
    ) -> AuditEntry:
        label = actor_label(actor)
        user = actor if getattr(actor, "is_authenticated", False) else None
        return cls.objects.create(
            actor=user,
            actor_label=label,
            action=action,
            object_type=obj._meta.model_name,
            object_id=str(obj.pk),
            before=before,
            after=after,
            note=note,
            channel=channel,
        )

    @classmethod
    def record_lockout(cls, username: str, address: str, failures: int) -> AuditEntry:
        """Record a sign-in lockout for `username` (as typed: maybe no user) from `address`."""
        return cls.objects.create(
            actor=None,
            actor_label=(username or "anonymous")[:150],
            action="auth.lockout",
            object_type="user",
            object_id=(username or "")[:50],
            before=None,
            after={"address": address, "failures": failures},
            note=f"Sign-in locked after {failures} failed attempts from {address}.",
        )
