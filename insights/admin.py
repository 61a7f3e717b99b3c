"""Alert rules are configured in the admin (a handful of rows, edited rarely); failure groups are
shown there read-only (their state changes on the groups page, audited)."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from insights.models import AlertDelivery, AlertRule, FailureGroup


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "failure_type", "threshold", "window_minutes", "enabled"]
    list_filter = ["kind", "enabled"]


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(admin.ModelAdmin):
    list_display = ["rule", "status", "attempts", "response_code", "created_at", "sent_at"]
    list_filter = ["status"]
    readonly_fields = ["rule", "payload", "status", "attempts", "response_code", "error", "sent_at"]


@admin.register(FailureGroup)
class FailureGroupAdmin(admin.ModelAdmin):
    list_display = ["id", "source", "failure_type", "pattern", "count", "last_seen", "state"]
    list_filter = ["state", "failure_type"]
    search_fields = ["pattern", "source", "signature"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
