"""Admin for every model. Policy and override edits go through `save_policy_change`, audited and
version-bumping like every other writer. Each admin says how its rows belong to projects
(`scoping`, orchestrator.admin_scoping), with why."""

from __future__ import annotations

from typing import Any

from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django import forms
from django.contrib import admin, messages
from django.contrib.auth.models import Group, User
from django.db import models
from django.http import HttpRequest, StreamingHttpResponse

from orchestrator import admin_owners  # noqa: F401  (registers the owner groups and rules)
from orchestrator.admin_scoping import (
    EveryProjectOnly,
    InProjects,
    ScopedAdmin,
    Shared,
    ThroughAuditedObject,
    rescope,
)
from orchestrator.analytics import export
from orchestrator.coordination import spend
from orchestrator.coordination.policy_changes import delete_policy_object, save_policy_change
from orchestrator.models import (
    DEFAULT_PROJECT_ID,
    ApiToken,
    AuditEntry,
    OutboxMessage,
    PolicyState,
    Price,
    Project,
    ProjectPolicy,
    ProviderOverride,
    ReviewItem,
    RoutingPolicy,
    Run,
    ScrubRule,
    SourceHealth,
    SpendBudget,
    WebhookAttempt,
    WebhookDelivery,
    Workflow,
)
from orchestrator.models.tokens import SCOPES
from orchestrator.vocabulary import Channel


@admin.register(Workflow)
class WorkflowAdmin(ScopedAdmin):
    scoping = InProjects("project", why="a workflow is its token's project's")
    list_display = [
        "id",
        "name",
        "status",
        "coordinator",
        "created_at",
        "finished_at",
        "coverage_summary",
    ]
    list_filter = ["status", "coordinator", "project", "created_at"]
    search_fields = ["name", "goal"]
    date_hierarchy = "created_at"
    readonly_fields = ["created_at", "updated_at"]


@admin.register(Run)
class RunAdmin(ScopedAdmin):
    scoping = InProjects("project", why="a run is its token's (or workflow's) project's")
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
    list_filter = ["status", "failure_type", "decision", "source", "retryable", "project"]
    search_fields = ["agent", "source", "operation", "idempotency_key", "provider_code"]
    raw_id_fields = ["workflow", "retry_of", "token"]
    readonly_fields = ["created_at", "request_hash"]
    # A count(*) over millions of rows on every changelist page is what makes admins slow.
    show_full_result_count = False
    list_select_related = ["workflow"]


class PolicyChangeForm(forms.ModelForm):
    """The admin's edit form with the note the policies page asks for, kept in the audit row."""

    change_note = forms.CharField(
        label="Why this change",
        required=False,
        max_length=300,
        help_text="Kept in the policy history with the new version.",
    )


class PolicyAuditMixin:
    """Route saves and deletes through the audited, version-bumping helpers."""

    form = PolicyChangeForm

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        note = form.cleaned_data.get("change_note") or "edited in the admin"
        version = save_policy_change(obj, request.user, note=note, channel=Channel.ADMIN)
        messages.info(request, f"Routing policy is now at version {version}.")

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        delete_policy_object(obj, request.user, "deleted in the admin", Channel.ADMIN)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for obj in queryset:
            delete_policy_object(obj, request.user, "deleted in the admin", Channel.ADMIN)


@admin.register(RoutingPolicy)
class RoutingPolicyAdmin(PolicyAuditMixin, ScopedAdmin):
    scoping = Shared(
        "the global routing table: every project routes by it, edited on the "
        "policies page by every policy editor"
    )
    list_display = [
        "failure_type",
        "max_attempts",
        "base_delay",
        "max_delay",
        "multiplier",
        "jitter",
        "action_when_exhausted",
        "hard_fail",
        "refresh_credentials",
        "review_deadline",
        "review_fallback",
        "updated_at",
    ]
    list_filter = ["hard_fail", "action_when_exhausted"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # one row per failure type, seeded by a migration

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Project)
class ProjectAdmin(ScopedAdmin):
    """Projects and the groups that may see them (none: every operator). The default project
    holds everything that names no other and is never deleted."""

    scoping = InProjects("pk", why="an operator sees the projects open to them")
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    filter_horizontal = ["groups"]
    readonly_fields = ["created_at"]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.is_default:
            return False
        return super().has_delete_permission(request, obj)


@admin.register(ProjectPolicy)
class ProjectPolicyAdmin(PolicyAuditMixin, ScopedAdmin):
    """A project's routing of a failure type in place of the global policy's: a new version of
    the policy each, audited."""

    scoping = InProjects("project", why="a project's own routing row")
    list_display = [
        "project",
        "failure_type",
        "max_attempts",
        "base_delay",
        "max_delay",
        "action_when_exhausted",
        "hard_fail",
        "review_fallback",
        "updated_at",
    ]
    list_filter = ["project", "failure_type"]
    autocomplete_fields = ["project"]


@admin.register(ProviderOverride)
class ProviderOverrideAdmin(PolicyAuditMixin, ScopedAdmin):
    scoping = Shared("classification rules every project's failures are read by")
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


@admin.register(ScrubRule)
class ScrubRuleAdmin(PolicyAuditMixin, ScopedAdmin):
    """The operators' secret filters on top of the built-in ones; a new version of the policy
    each (agents' clients fetch them with it)."""

    scoping = Shared("secret filters every project's reports go through")
    list_display = ["kind", "value", "enabled", "note", "created_at"]
    list_filter = ["kind", "enabled"]
    search_fields = ["value", "note"]
    readonly_fields = ["created_at", "created_by"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)


@admin.register(SpendBudget)
class SpendBudgetAdmin(ScopedAdmin):
    """Daily spend limits per source or agent; every save and delete is audited
    (spendbudget.create, .update, .delete)."""

    scoping = EveryProjectOnly(
        "a daily limit per source or agent, whoever calls it: spent by every project (the "
        "Costs page shows budgets to operators who may see every project only)"
    )
    list_display = ["scope", "name", "daily_limit", "currency", "enabled", "note", "updated_at"]
    list_filter = ["scope", "enabled", "currency"]
    search_fields = ["name", "note"]
    readonly_fields = ["created_at", "created_by"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request.user
        spend.save_budget(obj, request.user, note="edited in the admin")

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        spend.delete_budget(obj, request.user, note="deleted in the admin")

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for obj in queryset:
            spend.delete_budget(obj, request.user, note="deleted in the admin")


@admin.register(Price)
class PriceAdmin(PolicyAuditMixin, ScopedAdmin):
    """The price table: what runs reported without a cost are priced at. Part of the policy:
    each edit is a version with an audit row, and one reaching into the past prices the runs of
    the window it changed again (through the outbox, `orchestrator.pricing.reprice`)."""

    scoping = Shared("the price table every project's runs are priced at")
    list_display = [
        "kind",
        "name",
        "effective_from",
        *Price.VALUE_FIELDS,
    ]
    list_filter = ["kind", "currency"]
    search_fields = ["name", "note"]
    date_hierarchy = "effective_from"
    readonly_fields = ["created_at", "created_by"]
    actions = ["export_csv"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)

    @admin.action(description="Export the selected prices as CSV", permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: Any) -> StreamingHttpResponse:
        response = StreamingHttpResponse(
            export.prices_csv(queryset), content_type=export.FORMATS["csv"]
        )
        response["Content-Disposition"] = 'attachment; filename="prices.csv"'
        return response


@admin.register(PolicyState)
class PolicyStateAdmin(ScopedAdmin):
    scoping = Shared("the policy's version number, the same for every project")
    list_display = ["version", "changed_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ScopedAdmin):
    """Read only: the sweeper sends each row and deletes it."""

    scoping = EveryProjectOnly("tasks about every project's rows, named by id only")
    list_display = ["id", "task", "args", "created_at", "available_at", "attempts", "last_error"]
    list_filter = ["task"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(SourceHealth)
class SourceHealthAdmin(ScopedAdmin):
    scoping = EveryProjectOnly(
        "a source's breaker and retry budget count every project's calls, and name every "
        "project's sources"
    )
    list_display = [
        "source",
        "breaker_state",
        "consecutive_failures",
        "budget_tokens",
        "budget_capacity",
        "breaker_threshold",
        "breaker_cooldown",
        "disabled_at",
        "updated_at",
    ]
    list_filter = ["breaker_state"]
    search_fields = ["source"]


@admin.register(ReviewItem)
class ReviewItemAdmin(ScopedAdmin):
    scoping = InProjects("project", why="an item is its run's project's")
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
        "blocking",
        "owner_group",
        "delivered_at",
        "delivered_via",
    ]
    list_filter = [
        "state",
        "blocking",
        "origin",
        "failure_type",
        "resolution",
        "fallback_applied",
        "owner_group",
        "project",
    ]
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
        # Owners change by their rules and the chain (audited), never by hand.
        "blocking",
        "owner_group",
        "owned_since",
        "reminded_at",
    ]


class ApiTokenForm(forms.ModelForm):
    """Scopes as checkboxes of the known ones (stored as a list of their names)."""

    scopes = forms.MultipleChoiceField(
        choices=[(name, f"{name}: {meaning}") for name, meaning in SCOPES.items()],
        widget=forms.CheckboxSelectMultiple,
        required=False,
        help_text="None: the token reads and acts on its own runs, workflows and review items "
        "only (another's answer 404). Each grant is audited.",
    )

    class Meta:
        model = ApiToken
        fields = ["scopes"]  # the admin's `fields` add the others, with its overrides


@admin.register(ApiToken)
class ApiTokenAdmin(ScopedAdmin):
    scoping = InProjects("project", why="a token reports into its project")
    form = ApiTokenForm
    list_display = [
        "name",
        "hint",
        "project",
        "scopes",
        "callback_url",
        "created_at",
        "created_by",
        "revoked_at",
        "last_used_at",
        "running_timeout",
    ]
    list_filter = ["revoked_at", "project"]
    search_fields = ["name", "hint", "callback_url"]
    fields = [
        "name",
        "hint",
        "project",
        "scopes",
        "callback_url",
        "running_timeout",
        "created_at",
        "created_by",
        "revoked_at",
        "last_used_at",
    ]
    readonly_fields = ["hint", "created_at", "created_by", "revoked_at", "last_used_at"]
    actions = ["revoke_tokens"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # A token's project is chosen when it is issued: its runs never change project.
        return [*self.readonly_fields, *(["project"] if obj is not None else [])]

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)
        # None chosen: the default project, for an operator who may see it (the others choose).
        if db_field.name == "project" and field.queryset.filter(pk=DEFAULT_PROJECT_ID).exists():
            field.required = False
            field.empty_label = "default project"
        return field

    # A callback typed without a scheme is an HTTPS address (as Django 6 will assume).
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        """A new token, or a new callback URL's signing secret, is shown once: only its encrypted
        form is kept."""
        url = obj.callback_url
        if change:
            if "callback_url" in form.changed_data:
                self._new_callback(request, ApiToken.objects.get(pk=obj.pk), url)
            if "running_timeout" in form.changed_data:
                stored = ApiToken.objects.get(pk=obj.pk)
                stored.set_running_timeout(obj.running_timeout, actor=request.user)
            if "scopes" in form.changed_data:
                stored = ApiToken.objects.get(pk=obj.pk)
                stored.set_scopes(obj.scopes, actor=request.user, note="admin")
                obj.scopes = stored.scopes
            fresh = ApiToken.objects.get(pk=obj.pk)
            obj.callback_url, obj.sealed_signing_secret = (
                fresh.callback_url,
                fresh.sealed_signing_secret,
            )
            obj.save()
            return
        token, secret = ApiToken.issue_audited(
            obj.name,
            actor=request.user,
            note="admin",
            running_timeout=obj.running_timeout,
            scopes=obj.scopes,
            project_id=obj.project_id or DEFAULT_PROJECT_ID,
        )
        obj.pk, obj.hashed, obj.hint, obj.scopes = token.pk, token.hashed, token.hint, token.scopes
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
class AuditEntryAdmin(ScopedAdmin):
    scoping = ThroughAuditedObject("an entry is its object's project's")
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
class WebhookDeliveryAdmin(ScopedAdmin):
    """Read only: the sweeper and the delivery task own these rows."""

    scoping = InProjects(
        "item__project",
        "alert__rule__project",
        why="a review's resolution is its item's project's, an alert's its rule's",
    )
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


# Other apps' models, registered by them.

# Group membership decides who sees which project: an operator kept to some projects who could
# edit users or groups could let themselves into the others.
PEOPLE = EveryProjectOnly("users and groups decide who sees which project")
# The sign-in lockouts are the whole deployment's security log.
SIGN_IN = EveryProjectOnly("every operator's sign-in attempts, whatever their projects")

for model, scoping in (
    (User, PEOPLE),
    (Group, PEOPLE),
    (AccessAttempt, SIGN_IN),
    (AccessLog, SIGN_IN),
    (AccessFailureLog, SIGN_IN),
):
    rescope(admin.site, model, scoping)
