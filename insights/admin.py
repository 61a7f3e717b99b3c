"""Alert rules are configured in the admin, where a new rule's signing secret is shown once;
firings and failure groups are read-only (a group's state changes on its page, audited). How each
one's rows belong to projects: its `scoping` (orchestrator.admin_scoping)."""

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from insights.models import AlertDelivery, AlertRule, FailureGroup
from orchestrator.admin_scoping import EveryProjectOnly, InProjects, ScopedAdmin


@admin.register(AlertRule)
class AlertRuleAdmin(ScopedAdmin):
    scoping = InProjects("project", why="a rule watches its project's runs and review items")
    list_display = [
        "name",
        "project",
        "kind",
        "failure_type",
        "threshold",
        "window_minutes",
        "enabled",
        "signed",
    ]
    list_filter = ["kind", "enabled", "project"]
    autocomplete_fields = ["project"]
    actions = ["issue_signing_secrets"]

    @admin.display(boolean=True, description="signed")
    def signed(self, rule: AlertRule) -> bool:
        return bool(rule.sealed_signing_secret)

    def save_model(
        self, request: HttpRequest, obj: AlertRule, form: ModelForm, change: bool
    ) -> None:
        super().save_model(request, obj, form, change)
        if not change:
            self._show_new_secret(request, obj)

    @admin.action(description="Issue new signing secrets (the old ones stop signing)")
    def issue_signing_secrets(self, request: HttpRequest, queryset: QuerySet) -> None:
        for rule in queryset:
            self._show_new_secret(request, rule)

    def _show_new_secret(self, request: HttpRequest, rule: AlertRule) -> None:
        secret = rule.issue_signing_secret()
        note = f"{rule.name}: webhooks are signed with {secret} (shown this once)."
        messages.warning(request, note)


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(ScopedAdmin):
    scoping = InProjects("rule__project", why="a firing is its rule's project's")
    list_display = ["rule", "webhook", "created_at"]
    readonly_fields = ["rule", "webhook", "created_at"]


@admin.register(FailureGroup)
class FailureGroupAdmin(ScopedAdmin):
    scoping = EveryProjectOnly(
        "a group folds every project's failures (its pages are every-project operators' too)"
    )
    list_display = ["id", "source", "failure_type", "pattern", "count", "last_seen", "state"]
    list_filter = ["state", "failure_type"]
    search_fields = ["pattern", "source", "signature"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
