"""The dashboard's pages. One function per page; `if request.htmx` renders the page's named
fragment instead of the whole page. Every view is decorated with the permission it needs and
every object is looked up through `access.get_visible`. Views hold no business rules: state
changes are model methods (`item.claim`, `item.resolve`, `save_policy_change`) or the
coordinator's operator actions (`orchestrator.coordination.actions`); counting is `stats`'s."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import HTMX_STOP_POLLING, trigger_client_event

from dashboard import reports
from dashboard.access import EDIT_POLICIES, REVIEW, VIEW, get_visible, requires, visible
from dashboard.filters import RANGES, RunFilter, page, run_page
from dashboard.forms import BulkActionForm, ProviderOverrideForm, ResolveForm, RoutingPolicyForm
from dashboard.stats import WINDOWS, get_window
from dashboard.tiles import overview_tiles
from orchestrator.coordination import actions
from orchestrator.coordination.policy import preview_delays
from orchestrator.coordination.workflow import abort_workflow
from orchestrator.models import (
    AuditEntry,
    FailureType,
    ProviderOverride,
    ReviewItem,
    RoutingPolicy,
    Run,
    Workflow,
    delete_policy_object,
    save_policy_change,
)

# The envelope's bulky JSON is not needed in lists.
LIST_DEFER = ("results", "partial_results", "exception_chain", "alternatives")
ATTEMPTS_SHOWN = 100


def poll_seconds() -> float | int:
    """How often tiles refresh; a setting so the browser test need not wait 10 s."""
    value = float(getattr(settings, "DASHBOARD_POLL_SECONDS", 10))
    return int(value) if value.is_integer() else value


def _fragment(request: HttpRequest) -> bool:
    # A history restore (back button after a cache miss) needs the whole page, not a fragment.
    return bool(request.htmx) and not request.htmx.history_restore_request


def _safe_next(request: HttpRequest, default: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    allowed = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return target if allowed else default


# ---------------------------------------------------------------------------------------------
# Overview


@requires(VIEW)
@require_GET
def overview(request: HttpRequest) -> HttpResponse:
    window = get_window(request.GET.get("window"))
    context = {
        "window": window,
        "windows": WINDOWS.values(),
        "poll_seconds": poll_seconds(),
        **overview_tiles(window),
    }
    template = "dashboard/overview.html#tiles" if _fragment(request) else "dashboard/overview.html"
    return render(request, template, context)


# ---------------------------------------------------------------------------------------------
# Runs


@requires(VIEW)
@require_GET
def runs(request: HttpRequest) -> HttpResponse:
    filters = RunFilter.from_query(request.GET)
    qs = filters.apply(visible(request.user, Run)).select_related("workflow").defer(*LIST_DEFER)
    rows, next_cursor = run_page(qs, request.GET.get("after"))
    context = {
        "filters": filters,
        "runs": rows,
        "next_cursor": next_cursor,
        "first_page": not request.GET.get("after"),
        "statuses": Run.Status.choices,
        "any_failure": ",".join(Run.FAILURE),
        "failure_types": FailureType.choices,
        "ranges": RANGES.items(),
        "can_review": request.user.has_perm(REVIEW),
        "any_runs": bool(rows) or visible(request.user, Run).exists(),
        # Row links built from a prefix: fifty reverse() calls per page cost more than the SQL.
        "runs_prefix": reverse("dashboard:runs"),
        "workflows_prefix": reverse("dashboard:workflows"),
    }
    template = "dashboard/runs.html#results" if _fragment(request) else "dashboard/runs.html"
    return render(request, template, context)


@requires(VIEW)
@require_GET
def retrying(request: HttpRequest) -> HttpResponse:
    """Tasks whose latest attempt failed and whose next retry is scheduled (a queued retry)."""
    qs = (
        visible(request.user, Run)
        .retrying()
        .select_related("workflow", "retry_of")
        .defer(*LIST_DEFER)
        .order_by("due_at", "id")
    )
    rows = list(qs[:200])
    context = {"runs": rows, "now": timezone.now(), "poll_seconds": poll_seconds()}
    if not _fragment(request):
        return render(request, "dashboard/retrying.html", context)
    # Nothing left to wait for: 286 tells htmx to stop polling (after swapping the empty state).
    status = HTMX_STOP_POLLING if not rows else 200
    return render(request, "dashboard/retrying.html#table", context, status=status)


@requires(REVIEW)
@require_POST
def run_actions(request: HttpRequest) -> HttpResponse:
    """Retry, cancel or escalate the selected runs (bulk, or one from its detail page)."""
    back = _safe_next(request, reverse("dashboard:runs"))
    form = BulkActionForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, " ".join(errors))
        return redirect(back)
    action = form.cleaned_data["action"]
    ids = list(
        visible(request.user, Run)
        .filter(pk__in=form.cleaned_data["run"])
        .values_list("pk", flat=True)
    )
    done = actions.act_on_runs(action, ids, request.user, form.cleaned_data["reason"])
    skipped = len(form.cleaned_data["run"]) - done
    text = f"{action.capitalize()}: {done} run{'s' if done != 1 else ''} done"
    if skipped:
        text += f", {skipped} skipped (already finished, moved on, or not found)"
    messages.success(request, text + ".")
    return redirect(back)


@requires(VIEW)
@require_GET
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_visible(request.user, Run, related=("workflow", "retry_of"), pk=pk)
    attempts = list(visible(request.user, Run).attempts_of(run).defer(*LIST_DEFER)[:ATTEMPTS_SHOWN])
    context = {
        "run": run,
        "attempts": _with_waits(attempts),
        "review_items": run.review_items.select_related("resolved_by", "assignee"),
        "can_review": request.user.has_perm(REVIEW),
    }
    return render(request, "dashboard/run_detail.html", context)


def _with_waits(attempts: list[Run]) -> list[tuple[Run, float | None]]:
    """Pair each attempt with the wait since the previous one finished (its retry delay)."""
    out: list[tuple[Run, float | None]] = []
    previous = None
    for run in attempts:
        wait = None
        start = run.started_at or run.due_at
        if previous is not None and previous.finished_at and start:
            wait = (start - previous.finished_at).total_seconds()
        out.append((run, wait))
        previous = run
    return out


# ---------------------------------------------------------------------------------------------
# Workflows


@requires(VIEW)
@require_GET
def workflows(request: HttpRequest) -> HttpResponse:
    qs = visible(request.user, Workflow)
    status = request.GET.get("status", "")
    if status in Workflow.Status.values:
        qs = qs.filter(status=status)
    window = request.GET.get("range", "")
    if window in WINDOWS:
        qs = qs.filter(created_at__gte=WINDOWS[window].bounds(timezone.now())[1])
    rows, next_cursor = page(qs.annotate(run_count=Count("runs")), request.GET.get("after"), 30)
    context = {
        "workflows": rows,
        "next_cursor": next_cursor,
        "status": status,
        "range": window,
        "statuses": Workflow.Status.choices,
        "ranges": [(k, WINDOWS[k].label) for k in WINDOWS],
    }
    return render(request, "dashboard/workflows.html", context)


@requires(VIEW)
@require_GET
def workflow_detail(request: HttpRequest, pk: int) -> HttpResponse:
    workflow = get_visible(request.user, Workflow, pk=pk)
    limit = 500
    timeline = list(
        visible(request.user, Run)
        .filter(workflow=workflow)
        .defer(*LIST_DEFER)
        .order_by("created_at", "id")[: limit + 1]
    )
    context = {
        "workflow": workflow,
        "timeline": timeline[:limit],
        "truncated": len(timeline) > limit,
        "coverage": reports.coverage_topics(workflow.coverage),
        "open_reviews": workflow.review_items.filter(state__in=ReviewItem.PENDING).count(),
        "can_review": request.user.has_perm(REVIEW),
    }
    return render(request, "dashboard/workflow_detail.html", context)


@requires(REVIEW)
@require_POST
def workflow_abort(request: HttpRequest, pk: int) -> HttpResponse:
    """Stop a workflow that cannot come to any good: a reason is required, and audited."""
    workflow = get_visible(request.user, Workflow, pk=pk)
    back = redirect("dashboard:workflow_detail", pk=workflow.pk)
    note = " ".join(request.POST.get("note", "").split())[:500]
    if not note:
        messages.error(request, "Say why the workflow is aborted: the reason is kept in the audit.")
        return back
    if abort_workflow(workflow.pk, request.user, note=note):
        messages.success(request, "Workflow aborted: its pending runs were cancelled.")
    else:
        messages.info(request, "The workflow had already finished: nothing changed.")
    return back


# ---------------------------------------------------------------------------------------------
# Review queue


def _signature_counts(items: list[ReviewItem]) -> dict[str, int]:
    signatures = {i.signature for i in items if i.signature}
    rows = (
        ReviewItem.objects.open()
        .filter(signature__in=signatures)
        .values_list("signature")
        .annotate(n=Count("id"))
        .order_by()
    )
    return dict(rows)


def _decorate(items: list[ReviewItem], user: Any) -> list[ReviewItem]:
    counts = _signature_counts(items)
    for index, item in enumerate(items):
        item.group_size = counts.get(item.signature, 1) if item.signature else 1
        item.mine = item.assignee_id == user.pk
        # The oldest few (and the ones I hold) open with the run inline; the rest stay scannable.
        item.expanded = index < 2 or item.mine
    return items


@requires("orchestrator.view_reviewitem")
@require_GET
def review_queue(request: HttpRequest) -> HttpResponse:
    show_resolved = request.GET.get("show") == "resolved"
    base = visible(request.user, ReviewItem).select_related(
        "run", "run__workflow", "assignee", "resolved_by"
    )
    if show_resolved:
        items = list(base.filter(state=ReviewItem.State.RESOLVED).order_by("-resolved_at")[:100])
    else:
        items = _decorate(list(base.open()[:50]), request.user)
    context = {
        "items": items,
        "show_resolved": show_resolved,
        "open_total": base.open().count(),
        "can_review": request.user.has_perm(REVIEW),
        "form": ResolveForm(),
    }
    return render(request, "dashboard/review_queue.html", context)


def _item_response(
    request: HttpRequest, item: ReviewItem, form: ResolveForm | None = None, notice: str = ""
) -> HttpResponse:
    """The item's card (htmx) or the queue page with a message (plain form post)."""
    if not _fragment(request):
        if notice:
            messages.info(request, notice)
        return redirect(reverse("dashboard:review_queue") + f"#review-{item.pk}")
    item = get_visible(
        request.user,
        ReviewItem,
        related=("run", "run__workflow", "assignee", "resolved_by"),
        pk=item.pk,
    )
    context = {
        "item": _decorate([item], request.user)[0],
        "form": form or ResolveForm(),
        "notice": notice,
        "can_review": True,
    }
    return render(request, "dashboard/review_queue.html#item", context)


@requires(REVIEW)
@require_POST
def review_claim(request: HttpRequest, pk: int) -> HttpResponse:
    item = get_visible(request.user, ReviewItem, related=("assignee",), pk=pk)
    if item.claim(request.user):
        return _item_response(request, item, notice="Claimed: it is yours to resolve.")
    item.refresh_from_db()
    return _item_response(request, item, notice=_already(item))


def _already(item: ReviewItem) -> str:
    if item.state == ReviewItem.State.RESOLVED:
        who = item.resolved_by.get_username() if item.resolved_by else "the deadline fallback"
        when = (
            timezone.localtime(item.resolved_at).strftime("%Y-%m-%d %H:%M")
            if item.resolved_at
            else "?"
        )
        how = item.get_resolution_display()
        return f"Already resolved by {who} at {when} ({how}): nothing changed."
    if item.assignee:
        return f"Already claimed by {item.assignee.get_username()}."
    return "This item changed meanwhile: nothing was done."


@requires(REVIEW)
@require_POST
def review_resolve(request: HttpRequest, pk: int) -> HttpResponse:
    item = get_visible(request.user, ReviewItem, related=("assignee", "resolved_by"), pk=pk)
    if item.state == ReviewItem.State.CLAIMED and item.assignee_id != request.user.pk:
        # Whoever claimed it decides; a stale form from another operator must not win.
        return _item_response(request, item, notice=_already(item))
    form = ResolveForm(request.POST)
    if not form.is_valid():
        if not _fragment(request):
            messages.error(request, "The resolution was not saved: " + form.errors.as_text())
        return _item_response(request, item, form=form)
    try:
        data = form.cleaned_data
        resolved = item.resolve(
            request.user,
            data["resolution"],
            note=data["note"],
            edited_input=data.get("edited_input"),
            failure_type=data.get("failure_type") or None,
            save_override=bool(data.get("save_override")),
            apply_to_group=bool(data.get("apply_to_group")),
        )
    except ValidationError as exc:
        form.add_error(None, exc)
        return _item_response(request, item, form=form)
    item.refresh_from_db()
    if not resolved:
        return _item_response(request, item, notice=_already(item))
    extra = f" (and {resolved - 1} more with the same signature)" if resolved > 1 else ""
    return _item_response(request, item, notice=f"Resolved{extra}: the coordinator continues.")


# ---------------------------------------------------------------------------------------------
# Policies


def _history(user: Any) -> list[dict[str, Any]]:
    entries = visible(user, AuditEntry).filter(
        object_type__in=["routingpolicy", "provideroverride"]
    )[:40]
    return [{"entry": e, "changes": _diff(e.before, e.after)} for e in entries]


def _diff(before: dict | None, after: dict | None) -> list[tuple[str, Any, Any]]:
    before, after = before or {}, after or {}
    keys = [k for k in {**before, **after} if k != "version"]
    return [
        (k, before.get(k, "—"), after.get(k, "—")) for k in keys if before.get(k) != after.get(k)
    ]


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
        "history": _history(user),
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
    if _fragment(request) and request.GET.get("part") == "history":
        return render(
            request, "dashboard/policies.html#history", {"history": _history(request.user)}
        )
    return _policies_page(request)


@requires(EDIT_POLICIES)
@require_http_methods(["GET", "POST"])
def policy_edit(request: HttpRequest, pk: int) -> HttpResponse:
    policy = get_visible(request.user, RoutingPolicy, pk=pk)
    form = RoutingPolicyForm(request.POST or None, instance=policy)
    if request.method == "POST" and form.is_valid():
        try:
            save_policy_change(form.instance, request.user, form.cleaned_data["note"])
        except ValidationError as exc:
            form.add_error(None, exc)
        else:
            return _policy_saved(request, policy)
    # Invalid forms answer 200: htmx only swaps 2xx responses, and the errors must show inline.
    if _fragment(request):
        context = {"policy": policy, "policy_form": form, "can_edit": True}
        return render(request, "dashboard/policies.html#policy-edit-row", context)
    return _policies_page(request, editing=policy.pk, policy_form=form)


def _policy_saved(request: HttpRequest, policy: RoutingPolicy) -> HttpResponse:
    if not _fragment(request):
        messages.success(request, f"Policy for {policy.failure_type} saved.")
        return redirect("dashboard:policies")
    policy.refresh_from_db()
    policy.preview = preview_delays(policy)
    response = render(
        request, "dashboard/policies.html#policy-row", {"policy": policy, "can_edit": True}
    )
    # The history section listens for this event and reloads itself.
    return trigger_client_event(response, "policy-changed")


@requires(EDIT_POLICIES)
@require_GET
def policy_row(request: HttpRequest, pk: int) -> HttpResponse:
    """The read-only row again (the edit form's Cancel)."""
    policy = get_visible(request.user, RoutingPolicy, pk=pk)
    if not _fragment(request):
        return redirect("dashboard:policies")
    policy.preview = preview_delays(policy)
    return render(
        request, "dashboard/policies.html#policy-row", {"policy": policy, "can_edit": True}
    )


@requires(EDIT_POLICIES)
@require_http_methods(["GET", "POST"])
def override_edit(request: HttpRequest, pk: int | None = None) -> HttpResponse:
    override = get_visible(request.user, ProviderOverride, pk=pk) if pk else ProviderOverride()
    form = ProviderOverrideForm(request.POST or None, instance=override)
    if request.method == "POST" and form.is_valid():
        if not override.pk:
            form.instance.created_by = request.user
        try:
            save_policy_change(form.instance, request.user, "edited on the policies page")
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
    delete_policy_object(override, request.user, "deleted on the policies page")
    messages.success(request, f"Override deleted: {label}.")
    return redirect(reverse("dashboard:policies") + "#overrides")
