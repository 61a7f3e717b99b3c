"""Alert rules are configured in the admin (a handful of rows, edited rarely)."""

from django.contrib import admin

from dashboard.models import AlertDelivery, AlertRule


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "failure_type", "threshold", "window_minutes", "enabled"]
    list_filter = ["kind", "enabled"]


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(admin.ModelAdmin):
    list_display = ["rule", "status", "attempts", "response_code", "created_at", "sent_at"]
    list_filter = ["status"]
    readonly_fields = ["rule", "payload", "status", "attempts", "response_code", "error", "sent_at"]
