"""The audit trail: who changed what, when, with the state before and after."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from orchestrator.vocabulary import Channel


def actor_label(actor: Any) -> str:
    """How the audit trail and reason sentences name who acted: a username, a token, 'system'."""
    return getattr(actor, "get_username", lambda: "")() or str(actor or "system")


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
