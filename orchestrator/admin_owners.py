"""Admin for review items' owners: the owner groups (members, reminder age, next group in the
chain, address) and the ordered rules giving new items to them. Every save and delete is
audited (channel admin); the chain's reminders and moves are `coordination.owners`'."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import models, transaction
from django.http import HttpRequest

from orchestrator.admin_scoping import EveryProjectOnly, ScopedAdmin
from orchestrator.models import AuditEntry, OwnerGroup, OwnerRule
from orchestrator.vocabulary import Channel

# Rules name any project and groups name auth groups: who is asked is the deployment's to decide.
OWNERS = EveryProjectOnly("owner rules route every project's review items to auth groups")


class OwnerAuditMixin:
    """Audit each save and delete, with the row as it was and as it is."""

    @staticmethod
    def state(obj: Any) -> dict[str, Any]:
        return {
            f.name: str(f.value_from_object(obj))
            for f in obj._meta.concrete_fields
            if f.editable and f.name != "id"
        }

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        before = self.state(type(obj).objects.get(pk=obj.pk)) if change else None
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            action = f"{obj._meta.model_name}.{'change' if change else 'create'}"
            AuditEntry.record(
                actor=request.user,
                action=action,
                obj=obj,
                before=before,
                after=self.state(obj),
                channel=Channel.ADMIN,
            )

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        with transaction.atomic():
            AuditEntry.record(
                actor=request.user,
                action=f"{obj._meta.model_name}.delete",
                obj=obj,
                before=self.state(obj),
                after=None,
                channel=Channel.ADMIN,
            )
            super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for obj in queryset:
            self.delete_model(request, obj)


@admin.register(OwnerGroup)
class OwnerGroupAdmin(OwnerAuditMixin, ScopedAdmin):
    scoping = OWNERS
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    list_display = ["name", "members", "remind_after", "move_after", "next_group", "url"]
    search_fields = ["name"]


@admin.register(OwnerRule)
class OwnerRuleAdmin(OwnerAuditMixin, ScopedAdmin):
    scoping = OWNERS
    list_display = [
        "position",
        "owner_group",
        "project",
        "source",
        "agent",
        "failure_type",
        "enabled",
    ]
    list_display_links = ["owner_group"]
    list_editable = ["position", "enabled"]
    list_filter = ["owner_group", "failure_type", "enabled"]
    ordering = ["position", "id"]
