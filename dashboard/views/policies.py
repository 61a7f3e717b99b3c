"""Routing policies and provider overrides: the page, edits (audited), the dry run, versions and
restoring one."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import trigger_client_event

from dashboard.access import EDIT_POLICIES, get_visible, project_scope, requires, visible
from dashboard.forms import ProviderOverrideForm, RoutingPolicyForm
from dashboard.views.common import wants_fragment
from orchestrator.analytics import dryrun
from orchestrator.coordination import actions
from orchestrator.coordination.policy import preview_delays
from orchestrator.coordination.policy_changes import delete_policy_object, save_policy_change
from orchestrator.models import (
    AuditEntry,
    PolicyState,
    PolicyVersion,
    ProjectPolicy,
    ProviderOverride,
    RoutingPolicy,
)
from orchestrator.vocabulary import Channel


def _history(user: Any) -> list[dict[str, Any]]:
    """The latest edits, deletions and restores of the routing table and the overrides."""
    entries = visible(user, AuditEntry).filter(
        object_type__in=["routingpolicy", "provideroverride", "policyversion"]
    )[:40]
    return [{"entry": e, "changes": _diff(e.before, e.after)} for e in entries]


def _diff(before: dict | None, after: dict | None) -> list[tuple[str, Any, Any]]:
    before, after = before or {}, after or {}
    keys = [k for k in {**before, **after} if k != "version"]
    return [
        (k, before.get(k, "—"), after.get(k, "—")) for k in keys if before.get(k) != after.get(k)
    ]


VERSIONS_SHOWN = 20


def _versions(user: Any) -> list[dict[str, Any]]:
    """The latest versions, each with what changed from the one before."""
    if not user.has_perm("orchestrator.view_routingpolicy"):
        return []
    rows = list(PolicyVersion.objects.newest_first()[: VERSIONS_SHOWN + 1])
    previous = [*rows[1:], None]
    return [
        {"version": v, "changes": v.changes_since(before), "first": before is None}
        for v, before in zip(rows[:VERSIONS_SHOWN], previous, strict=False)
    ]


def _policy_version() -> PolicyState:
    """The version every decision records (v1 with no change time before the first edit)."""
    return PolicyState.objects.filter(pk=1).first() or PolicyState(version=1, changed_at=None)


def _policy_rows(user: Any) -> list[RoutingPolicy]:
    rows = list(visible(user, RoutingPolicy))
    for policy in rows:
        policy.preview = preview_delays(policy)
    return rows


def _policies_page(request: HttpRequest, status: int = 200, **extra: Any) -> HttpResponse:
    user = request.user
    context = {
        "policies": _policy_rows(user),
        "overrides": visible(user, ProviderOverride),
        # Projects' own rows, in the projects the switcher shows (edited in the admin).
        "project_policies": visible(user, ProjectPolicy).select_related("project"),
        "history": _history(user),
        "versions": _versions(user),
        "policy_version": _policy_version(),
        "can_edit": user.has_perm(EDIT_POLICIES),
        "editing": None,
        "policy_form": None,
        "override_form": None,
        "override_editing": None,
        **extra,
    }
    return render(request, "dashboard/policies.html", context, status=status)


@requires("orchestrator.view_routingpolicy")
@require_GET
def policies(request: HttpRequest) -> HttpResponse:
    if wants_fragment(request) and request.GET.get("part") == "history":
        return render(
            request, "dashboard/policies.html#history", {"history": _history(request.user)}
        )
    if wants_fragment(request) and request.GET.get("part") == "versions":
        context = {
            "versions": _versions(request.user),
            "policy_version": _policy_version(),
            "can_edit": request.user.has_perm(EDIT_POLICIES),
        }
        return render(request, "dashboard/policies.html#versions", context)
    if wants_fragment(request) and request.GET.get("part") == "version":
        context = {"policy_version": _policy_version()}
        return render(request, "dashboard/policies.html#version", context)
    return _policies_page(request)


@requires(EDIT_POLICIES)
@require_http_methods(["GET", "POST"])
def policy_edit(request: HttpRequest, pk: int) -> HttpResponse:
    policy = get_visible(request.user, RoutingPolicy, pk=pk)
    form = RoutingPolicyForm(request.POST or None, instance=policy)
    if request.method == "POST" and form.is_valid():
        try:
            save_policy_change(
                form.instance, request.user, form.cleaned_data["note"], Channel.DASHBOARD
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            return _policy_saved(request, policy)
    # Invalid forms answer 200: htmx only swaps 2xx responses, and the errors must show inline.
    if wants_fragment(request):
        context = {"policy": policy, "policy_form": form, "can_edit": True}
        return render(request, "dashboard/policies.html#policy-edit-row", context)
    return _policies_page(request, editing=policy.pk, policy_form=form)


def _policy_saved(request: HttpRequest, policy: RoutingPolicy) -> HttpResponse:
    if not wants_fragment(request):
        messages.success(request, f"Policy for {policy.failure_type} saved.")
        return redirect("dashboard:policies")
    policy.refresh_from_db()
    policy.preview = preview_delays(policy)
    response = render(
        request, "dashboard/policies.html#policy-row", {"policy": policy, "can_edit": True}
    )
    # The history section listens for this event and reloads itself.
    return trigger_client_event(response, "policy-changed")


DRY_RUN_FIGURES = (
    ("retries", "Retries"),
    ("waiting_seconds", "Waiting before retries (s)"),
    ("switches", "Switches"),
    ("escalations", "Escalations"),
    ("escalations_per_day", "Review load per day"),
    ("aborts", "Aborts"),
    ("accepted_partial", "Accepted partial"),
    ("expected_wasted_calls", "Expected wasted calls"),
    ("expected_recovered", "Expected recovered runs"),
)


def _days(request: HttpRequest) -> float:
    try:
        days = float(request.POST.get("days") or dryrun.DEFAULT_DAYS)
    except ValueError:
        return dryrun.DEFAULT_DAYS
    return min(max(days, 1.0), dryrun.MAX_DAYS) if days == days else dryrun.DEFAULT_DAYS


@requires(EDIT_POLICIES)
@require_POST
def policy_dry_run(request: HttpRequest, pk: int) -> HttpResponse:
    """The edit form's proposal replayed over the last days' failures beside the current row;
    nothing is saved (the form's Save does that)."""
    policy = get_visible(request.user, RoutingPolicy, pk=pk)
    form = RoutingPolicyForm(request.POST, instance=policy)
    result = None
    if form.is_valid():
        # The chosen projects' failures, each under its own table (a project overriding this
        # failure type keeps its row); every project's under the global table for "all".
        result = dryrun.dry_run(
            [form.instance.snapshot()],
            days=_days(request),
            projects=project_scope(request.user),
            global_rows=True,
        )
        result["rows"] = [
            (label, result["current"][key], result["proposed"][key], result["difference"][key])
            for key, label in DRY_RUN_FIGURES
        ]
        result["why_unchanged"] = _why_unchanged(result, policy, form.changed_data)
    if wants_fragment(request):
        context = {"dry_run": result, "policy_form": form, "policy": policy}
        return render(request, "dashboard/policies.html#dry-run", context)
    return _policies_page(request, editing=policy.pk, policy_form=form, dry_run=result)


# Fields that act after a decision (on the review item it opens): no replayed figure shows them.
AFTER_DECISION = {"review_deadline", "review_fallback"}


def _why_unchanged(result: dict[str, Any], policy: RoutingPolicy, changed: list[str]) -> str:
    """Why every difference of a dry run is 0, in words ("" when one is not)."""
    if any(diff for *_, diff in result["rows"]):
        return ""
    days = f"{result['days']:g} day{'s' if result['days'] != 1 else ''}"
    if not result["failures"]:
        return f"No failures in the last {days}: there is nothing to replay. Replay more days."
    label = policy.get_failure_type_display()
    routed = sum(result["current"]["by_failure_type"].get(policy.failure_type, {}).values())
    if not routed:
        return (
            f"None of the {result['failures']} failures of the last {days} was {label}, the "
            "only failure type this row routes: the proposal decides nothing differently."
        )
    why = (
        f"This policy makes the same decisions as the current one (v{result['current_version']}) "
        f"on the last {round(routed)} {label} failures ({days}), so no figure changes."
    )
    if AFTER_DECISION & set(changed):
        why += " The review deadline and its fallback act after a decision: not replayed."
    return why


@requires(EDIT_POLICIES)
@require_http_methods(["GET", "POST"])
def policy_restore(request: HttpRequest, version: int) -> HttpResponse:
    """Restore version N as a new version, audited with the note given: GET shows what it would
    change and asks to confirm; only a POST carrying that confirmation restores."""
    target = PolicyVersion.objects.filter(version=version).first()
    if target is None:
        raise Http404
    here = reverse("dashboard:policy_restore", args=[version])
    if request.method == "GET":
        current = PolicyState.current_version()
        now = PolicyVersion.objects.filter(version=current).first()
        context = {
            "target": target,
            "current": current,
            "next_version": current + 1,
            "changes": target.changes_since(now) if now else [],
        }
        return render(request, "dashboard/policy_restore_confirm.html", context)
    if request.POST.get("confirm") != "yes":
        return redirect(here)
    note = (request.POST.get("note") or "").strip()[:300] or f"restored version {version}"
    restored = actions.do_restore_policy_version(
        version, request.user, channel=Channel.DASHBOARD, note=note
    )
    messages.success(request, f"Version {version} restored as version {restored.version}.")
    return redirect(reverse("dashboard:policies") + "#versions")


@requires(EDIT_POLICIES)
@require_GET
def policy_row(request: HttpRequest, pk: int) -> HttpResponse:
    """The read-only row again (the edit form's Cancel)."""
    policy = get_visible(request.user, RoutingPolicy, pk=pk)
    if not wants_fragment(request):
        return redirect("dashboard:policies")
    policy.preview = preview_delays(policy)
    return render(
        request, "dashboard/policies.html#policy-row", {"policy": policy, "can_edit": True}
    )


OVERRIDE_PREFILL = ("provider", "match_on", "match_value", "failure_type", "retryable", "note")


@requires(EDIT_POLICIES)
@require_http_methods(["GET", "POST"])
def override_edit(request: HttpRequest, pk: int | None = None) -> HttpResponse:
    override = get_visible(request.user, ProviderOverride, pk=pk) if pk else ProviderOverride()
    # A new override may come prefilled from the query string (the retry audit's rows).
    initial = {} if pk else {k: v for k, v in request.GET.items() if k in OVERRIDE_PREFILL}
    form = ProviderOverrideForm(request.POST or None, instance=override, initial=initial)
    if request.method == "POST" and form.is_valid():
        if not override.pk:
            form.instance.created_by = request.user
        try:
            save_policy_change(
                form.instance, request.user, "edited on the policies page", Channel.DASHBOARD
            )
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            messages.success(request, f"Override saved: {form.instance}.")
            return redirect(reverse("dashboard:policies") + "#overrides")
    return _policies_page(request, override_form=form, override_editing=override.pk or "new")


@requires(EDIT_POLICIES)
@require_POST
def override_delete(request: HttpRequest, pk: int) -> HttpResponse:
    override = get_visible(request.user, ProviderOverride, pk=pk)
    label = str(override)
    delete_policy_object(override, request.user, "deleted on the policies page", Channel.DASHBOARD)
    messages.success(request, f"Override deleted: {label}.")
    return redirect(reverse("dashboard:policies") + "#overrides")
