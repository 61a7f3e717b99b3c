"""Admin for every model. Policy and override edits go through `save_policy_change`, audited and
version-bumping like every other writer."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db import models
from django.http import HttpRequest

from orchestrator.coordination.policy_changes import delete_policy_object, save_policy_change
from orchestrator.models import (
    ApiToken,
    AuditEntry,
    OutboxMessage,
    PolicyState,
    ProviderOverride,
    ReviewItem,
    RoutingPolicy,
    Run,
    SourceHealth,
    WebhookAttempt,
    WebhookDelivery,
    Workflow,
)


@admin.register(Workflow)
class WorkflowAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "name",
        "status",
        "coordinator",
        "created_at",
        "finished_at",
        "coverage_summary",
    ]
    list_filter = ["status", "coordinator", "created_at"]
    search_fields = ["name", "goal"]
    date_hierarchy = "created_at"
    readonly_fields = ["created_at", "updated_at"]


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "created_at",
        "agent",
        "source",
        "status",
        "failure_type",
        "result_count",
        "partial_count",
        "attempt",
        "decision",
        "workflow",
    ]
    list_filter = ["status", "failure_type", "decision", "source", "retryable"]
    search_fields = ["agent", "source", "operation", "idempotency_key", "provider_code"]
    raw_id_fields = ["workflow", "retry_of", "token"]
    readonly_fields = ["created_at", "request_hash"]
    # A count(*) over millions of rows on every changelist page is what makes admins slow.
    show_full_result_count = False
    list_select_related = ["workflow"]


class PolicyAuditMixin:
    """Route saves and deletes through the audited, version-bumping helpers."""

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        version = save_policy_change(obj, request.user, note="edited in the admin")
        messages.info(request, f"Routing policy is now at version {version}.")

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        delete_policy_object(obj, request.user, note="deleted in the admin")

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for obj in queryset:
            delete_policy_object(obj, request.user, note="deleted in the admin")


@admin.register(RoutingPolicy)
class RoutingPolicyAdmin(PolicyAuditMixin, admin.ModelAdmin):
    list_display = [
        "failure_type",
        "max_attempts",
        "base_delay",
        "max_delay",
        "multiplier",
        "jitter",
        "action_when_exhausted",
        "hard_fail",
        "review_deadline",
        "review_fallback",
        "updated_at",
    ]
    list_filter = ["hard_fail", "action_when_exhausted"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # one row per failure type, seeded by a migration

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ProviderOverride)
class ProviderOverrideAdmin(PolicyAuditMixin, admin.ModelAdmin):
    list_display = [
        "provider",
        "match_on",
        "match_value",
        "failure_type",
        "retryable",
        "enabled",
        "note",
    ]
    list_filter = ["match_on", "failure_type", "enabled"]
    search_fields = ["provider", "match_value", "note"]
    readonly_fields = ["created_at", "created_by"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)


@admin.register(PolicyState)
class PolicyStateAdmin(admin.ModelAdmin):
    list_display = ["version", "changed_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(OutboxMessage)
class OutboxMessageAdmin(admin.ModelAdmin):
    """Read only: the sweeper sends each row and deletes it."""

    list_display = ["id", "task", "args", "created_at", "available_at", "attempts", "last_error"]
    list_filter = ["task"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(SourceHealth)
class SourceHealthAdmin(admin.ModelAdmin):
    list_display = [
        "source",
        "breaker_state",
        "consecutive_failures",
        "budget_tokens",
        "budget_capacity",
        "breaker_threshold",
        "breaker_cooldown",
        "updated_at",
    ]
    list_filter = ["breaker_state"]
    search_fields = ["source"]


@admin.register(ReviewItem)
class ReviewItemAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "created_at",
        "state",
        "failure_type",
        "run",
        "assignee",
        "resolution",
        "resolved_by",
        "resolved_at",
        "fallback_applied",
        "delivered_at",
        "delivered_via",
    ]
    list_filter = ["state", "origin", "failure_type", "resolution", "fallback_applied"]
    search_fields = ["reason", "note", "signature", "source", "agent"]
    raw_id_fields = ["run", "workflow"]
    # Resolutions must go through the review queue (audited, feeds the coordinator exactly once).
    readonly_fields = [
        "state",
        "resolution",
        "resolved_by",
        "resolved_at",
        "continued_at",
        "outcome",
        "fallback_applied",
        "token",
        "delivered_at",
        "delivered_via",
    ]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "hint",
        "callback_url",
        "created_at",
        "created_by",
        "revoked_at",
        "last_used_at",
    ]
    list_filter = ["revoked_at"]
    search_fields = ["name", "hint", "callback_url"]
    fields = [
        "name",
        "hint",
        "callback_url",
        "created_at",
        "created_by",
        "revoked_at",
        "last_used_at",
    ]
    readonly_fields = ["hint", "created_at", "created_by", "revoked_at", "last_used_at"]
    actions = ["revoke_tokens"]
    # A callback typed without a scheme is an HTTPS address (as Django 6 will assume).
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        """A new token, or a new callback URL's signing secret, is shown once: only its encrypted
        form is kept."""
        url = obj.callback_url
        if change:
            if "callback_url" in form.changed_data:
                self._new_callback(request, ApiToken.objects.get(pk=obj.pk), url)
            fresh = ApiToken.objects.get(pk=obj.pk)
            obj.callback_url, obj.sealed_signing_secret = (
                fresh.callback_url,
                fresh.sealed_signing_secret,
            )
            obj.save()
            return
        token, secret = ApiToken.issue_audited(obj.name, actor=request.user, note="admin")
        obj.pk, obj.hashed, obj.hint = token.pk, token.hashed, token.hint
        messages.warning(
            request,
            f"Token “{token.name}” created. Copy its secret now, it will not be shown again: "
            f"{secret}",
        )
        if url:
            self._new_callback(request, token, url)
        obj.callback_url = url
        obj.sealed_signing_secret = ApiToken.objects.get(pk=token.pk).sealed_signing_secret

    def _new_callback(self, request: HttpRequest, token: ApiToken, url: str) -> None:
        if not url:
            token.callback_url = ""
            token.save(update_fields=["callback_url"])
            messages.info(request, f"Token “{token.name}”: no callback URL any more.")
            return
        secret = token.set_callback(url, actor=request.user)
        messages.warning(
            request,
            f"Resolutions of “{token.name}” go to {url}, signed with this secret (copy it now, "
            f"it will not be shown again): {secret}",
        )

    @admin.action(description="Revoke the selected tokens")
    def revoke_tokens(self, request: HttpRequest, queryset: Any) -> None:
        revoked = sum(token.revoke_audited(actor=request.user) for token in queryset)
        messages.info(request, f"Revoked {revoked} token(s).")

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoke instead: runs keep pointing at the token that reported them


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "actor_label", "action", "object_type", "object_id", "note"]
    list_filter = ["action", "object_type"]
    search_fields = ["actor_label", "object_id", "note"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class WebhookAttemptInline(admin.TabularInline):
    model = WebhookAttempt
    extra = 0
    fields = ["number", "started_at", "finished_at", "status_code", "acked", "error"]
    readonly_fields = fields
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    """Read only: the sweeper and the delivery task own these rows."""

    list_display = [
        "id",
        "event",
        "item",
        "token",
        "url",
        "state",
        "attempts",
        "created_at",
        "delivered_at",
        "last_error",
    ]
    list_filter = ["state", "event", "token"]
    search_fields = ["url", "delivery_id", "last_error"]
    raw_id_fields = ["item"]
    inlines = [WebhookAttemptInline]
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
