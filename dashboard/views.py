"""The dashboard's pages. One function per page; `if request.htmx` renders the page's named
fragment instead of the whole page. Every view is decorated with the permission it needs and
every object is looked up through `access.get_visible`. Views hold no business rules: state
changes are model methods (`item.claim`, `item.resolve`, `save_policy_change`) or the
coordinator's operator actions (`orchestrator.coordination.actions`); counting is `stats`'s."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.views.decorators.http import require_GET, require_http_methods, require_POST
from django_htmx.http import trigger_client_event

from dashboard import groups, queue, reports
from dashboard.access import EDIT_POLICIES, REVIEW, VIEW, get_visible, requires, visible
from dashboard.filters import (
    PAGE_SIZE,
    RANGES,
    RunFilter,
    canonical_failure_type,
    known_names,
    total,
)
from dashboard.forms import BulkActionForm, ProviderOverrideForm, ResolveForm, RoutingPolicyForm
from dashboard.groups import GroupFilter
from dashboard.models import FailureGroup
from dashboard.stats import WINDOWS, get_window
from dashboard.tiles import overview_tiles
from orchestrator import keyset
from orchestrator.analytics import dryrun, export, retryable, slo
from orchestrator.coordination import actions, efficacy, review
from orchestrator.coordination.policy import preview_delays
from orchestrator.coordination.workflow import abort_workflow
from orchestrator.models import (
    AuditEntry,
    FailureType,
    PolicyState,
    PolicyVersion,
    ProviderOverride,
    ReviewItem,
    RoutingPolicy,
    Run,
    Workflow,
    delete_policy_object,
    restore_policy_version,
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
    """Runs newest first, filtered from the query string, in keyset pages both ways, with their
    total; a filter the page cannot use is shown as an error instead of being ignored."""
    filters = RunFilter.from_query(request.GET)
    context: dict[str, Any] = {
        "filters": filters,
        "page": None,
        "runs": [],
        "statuses": Run.Status.choices,
        "any_failure": ",".join(Run.FAILURE),
        "failure_types": FailureType.choices,
        "ranges": RANGES.items(),
        "can_review": request.user.has_perm(REVIEW),
        "known_sources": known_names("source"),
        "known_agents": known_names("agent"),
        # Row links built from a prefix: fifty reverse() calls per page cost more than the SQL.
        "runs_prefix": reverse("dashboard:runs"),
        "workflows_prefix": reverse("dashboard:workflows"),
    }
    if not filters.errors:
        context |= _runs_results(request, filters)
    template = "dashboard/runs.html#results" if _fragment(request) else "dashboard/runs.html"
    # A refused filter is the client's mistake (400) on a whole page; htmx swaps only 2xx, so a
    # fragment answers 200 and shows the same errors in place.
    status = 400 if filters.errors and not _fragment(request) else 200
    return render(request, template, context, status=status)


@requires(VIEW)
@require_GET
def runs_export(request: HttpRequest) -> HttpResponse:
    """The runs list's filters as a download: CSV (`format=csv`) or JSON Lines (`format=jsonl`),
    streamed over keyset pages, every matching run (the list's page cursors are ignored)."""
    filters = RunFilter.from_query(request.GET)
    fmt = request.GET.get("format", "csv")
    if fmt not in export.FORMATS:
        filters.errors.append(f"Unknown export format {fmt!r}: csv or jsonl.")
    if filters.errors:
        return HttpResponse("\n".join(filters.errors) + "\n", status=400, content_type="text/plain")
    matching = filters.apply(visible(request.user, Run))
    return _download(export.runs_export(matching, fmt), fmt, "runs")


def _download(lines: Any, fmt: str, name: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(lines, content_type=export.FORMATS[fmt])
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="{name}-{stamp}.{fmt}"'
    return response


def _runs_results(request: HttpRequest, filters: RunFilter) -> dict[str, Any]:
    matching = filters.apply(visible(request.user, Run))
    qs = matching.select_related("workflow").defer(*LIST_DEFER)
    page = keyset.page(qs, PAGE_SIZE, after=filters.after, before=filters.before)
    for run in page.rows:
        run.actions = actions.applicable(run)
    offered = {a for run in page.rows for a in run.actions}
    return {
        "page": page,
        "runs": page.rows,
        "total": total(matching),
        "bulk_actions": [a for a in actions.RunAction if a in offered],
        "unmatched": [] if page.rows else filters.unmatched(),
        "any_runs": bool(page.rows) or visible(request.user, Run).exists(),
    }


@requires(VIEW)
@require_GET
def retrying(request: HttpRequest) -> HttpResponse:
    """Tasks whose latest attempt failed and whose next retry is scheduled (a queued retry).

    The page keeps refreshing while it is empty: a retry scheduled a second later must appear
    without a reload (the point of the page is to watch them come and go).
    """
    qs = (
        visible(request.user, Run)
        .retrying()
        .select_related("workflow", "retry_of")
        .defer(*LIST_DEFER)
        .order_by("due_at", "id")
    )
    rows = list(qs[:200])
    context = {"runs": rows, "now": timezone.now(), "poll_seconds": poll_seconds()}
    template = "dashboard/retrying.html#table" if _fragment(request) else "dashboard/retrying.html"
    return render(request, template, context)


IN_FLIGHT_SHOWN = 200


@requires(VIEW)
@require_GET
def in_flight(request: HttpRequest) -> HttpResponse:
    """Runs started and not finished, the longest running first, with their age: the built-in
    coordinator's (held by a worker's lease) and those agents reported as running (which only
    their agent finishes: the sweeper never takes them for stranded)."""
    matching = visible(request.user, Run).in_flight()
    rows = list(
        matching.select_related("workflow")
        .defer(*LIST_DEFER)
        .order_by("created_at", "id")[:IN_FLIGHT_SHOWN]
    )
    context = {
        "runs": rows,
        "total": total(matching),
        "now": timezone.now(),
        "poll_seconds": poll_seconds(),
    }
    template = (
        "dashboard/in_flight.html#table" if _fragment(request) else "dashboard/in_flight.html"
    )
    return render(request, template, context)


@requires(REVIEW)
@require_POST
def run_actions(request: HttpRequest) -> HttpResponse:
    """Retry, cancel or escalate the selected runs (bulk, or one from its detail page).

    A cancel, and any action on several runs, first shows what it will do to which runs and
    asks to confirm (a second post with `confirmed`); a retry or an escalation of one run from
    its page acts at once. Escalating needs a reason: the reviewer reads it.
    """
    back = _safe_next(request, reverse("dashboard:runs"))
    form = BulkActionForm(request.POST)
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, " ".join(errors))
        return redirect(back)
    data = form.cleaned_data
    action = actions.RunAction(data["action"])
    runs_qs = visible(request.user, Run).filter(pk__in=data["run"])
    single = len(data["run"]) == 1 and action != actions.RunAction.CANCEL
    if not data["confirmed"] and not single:
        return _confirm_actions(request, action, list(runs_qs.defer(*LIST_DEFER)), data, back)
    ids = list(runs_qs.values_list("pk", flat=True))
    done = actions.act_on_runs(action, ids, request.user, data["reason"])
    skipped = len(data["run"]) - done
    text = f"{action.label.capitalize()}: {done} run{'s' if done != 1 else ''} done"
    if skipped:
        text += f", {skipped} skipped (already finished, moved on, or not found)"
    messages.success(request, text + ".")
    return redirect(back)


def _confirm_actions(
    request: HttpRequest,
    action: actions.RunAction,
    rows: list[Run],
    data: dict[str, Any],
    back: str,
) -> HttpResponse:
    """The page that says which runs an action will change, which it will skip and why."""
    applies = [run for run in rows if run.status in action.statuses]
    skipped = [run for run in rows if run.status not in action.statuses]
    context = {
        "action": action,
        "applies": applies,
        "skipped": skipped,
        "missing": len(data["run"]) - len(rows),
        "reason": data["reason"],
        "next": back,
        "statuses": ", ".join(action.statuses),
    }
    return render(request, "dashboard/run_actions_confirm.html", context)


@requires(VIEW)
@require_GET
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = get_visible(request.user, Run, related=("workflow", "retry_of"), pk=pk)
    attempts = list(visible(request.user, Run).attempts_of(run).defer(*LIST_DEFER)[:ATTEMPTS_SHOWN])
    group = FailureGroup.objects.filter(signature=run.signature).first() if run.signature else None
    context = {
        "run": run,
        "attempts": _with_waits(attempts),
        "review_items": run.review_items.select_related(
            "resolved_by", "assignee", "workflow", "webhook"
        ).prefetch_related("webhook__tries"),
        "can_review": request.user.has_perm(REVIEW),
        "run_actions": actions.applicable(run),
        "failure_group": group,
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
    try:
        after = keyset.decode_cursor(request.GET["after"]) if request.GET.get("after") else None
    except ValueError:
        messages.error(request, "That page link was damaged: here are the newest workflows.")
        after = None
    page = keyset.page(qs.annotate(run_count=Count("runs")), 30, after=after)
    context = {
        "workflows": page.rows,
        "next_cursor": page.next,
        "status": status,
        "range": window,
        "statuses": Workflow.Status.choices,
        "ranges": [(k, WINDOWS[k].label) for k in WINDOWS],
    }
    return render(request, "dashboard/workflows.html", context)


TIMELINE_LIMIT = 500


@requires(VIEW)
@require_GET
def workflow_detail(request: HttpRequest, pk: int) -> HttpResponse:
    workflow = get_visible(request.user, Workflow, pk=pk)
    runs = list(
        visible(request.user, Run)
        .filter(workflow=workflow)
        .defer(*LIST_DEFER)
        .order_by("created_at", "id")[: TIMELINE_LIMIT + 1]
    )
    reviews = list(
        visible(request.user, ReviewItem)
        .filter(workflow=workflow)
        .select_related("assignee", "resolved_by")
        .order_by("created_at", "id")
    )
    pending = [item for item in reviews if item.is_pending]
    context = {
        "workflow": workflow,
        "timeline": _timeline(runs[:TIMELINE_LIMIT], reviews),
        "run_count": min(len(runs), TIMELINE_LIMIT),
        "truncated": len(runs) > TIMELINE_LIMIT,
        "coverage": reports.coverage_topics(workflow.coverage),
        "open_reviews": pending,
        "can_review": request.user.has_perm(REVIEW),
    }
    return render(request, "dashboard/workflow_detail.html", context)


COVERAGE_FORMATS = {"json": "application/json", "md": "text/markdown; charset=utf-8"}


@requires(VIEW)
@require_GET
def workflow_coverage_export(request: HttpRequest, pk: int, fmt: str) -> HttpResponse:
    """A workflow's coverage report as JSON or Markdown, to attach to what the workflow wrote."""
    workflow = get_visible(request.user, Workflow, pk=pk)
    if fmt not in COVERAGE_FORMATS:
        raise Http404
    report = export.coverage_report(workflow)
    if fmt == "json":
        body = json.dumps(report, indent=2, ensure_ascii=False, default=str)
    else:
        body = export.coverage_markdown(report)
    response = HttpResponse(body, content_type=COVERAGE_FORMATS[fmt])
    name = f"coverage-workflow-{workflow.pk}.{fmt}"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


def _timeline(runs: list[Run], reviews: list[ReviewItem]) -> list[dict[str, Any]]:
    """Runs and review decisions in time order: each escalation's resolution, who took it and
    what applying it did, beside the runs it started."""
    entries = [{"at": run.created_at, "run": run} for run in runs]
    for item in reviews:
        entries.append({"at": item.created_at, "opened": item})
        if item.resolved_at:
            entries.append({"at": item.resolved_at, "resolved": item})
    entries.sort(key=lambda e: (e["at"], "run" not in e))
    return entries


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
# Failure groups


@requires(VIEW)
@require_GET
def failure_groups(request: HttpRequest) -> HttpResponse:
    """Failures grouped by signature, most recently seen first, with their counts in a window."""
    f = GroupFilter.from_query(request.GET)
    now = timezone.now()
    context: dict[str, Any] = {
        "f": f,
        "rows": [],
        "page": None,
        "windows": groups.GROUP_WINDOWS.values(),
        "states": FailureGroup.State.choices,
        "failure_types": FailureType.choices,
        "has_choices": [(k, label) for k, (label, _) in groups.HAS.items()],
    }
    if not f.errors:
        context |= _group_rows(request, f, now)
    template = "dashboard/groups.html"
    if _fragment(request):
        template += "#results"
    status = 400 if f.errors and not _fragment(request) else 200
    return render(request, template, context, status=status)


def _group_rows(request: HttpRequest, f: GroupFilter, now: Any) -> dict[str, Any]:
    qs = f.apply(visible(request.user, FailureGroup))
    window = groups.GROUP_WINDOWS.get(f.range)
    counts: dict[int, dict[str, int]] = {}
    if window is not None:
        counts = groups.window_counts(window, now)
        column = groups.HAS[f.has][1] if f.has else "count"
        qs = qs.filter(pk__in=[pk for pk, c in counts.items() if c[column] > 0])
    elif f.has:
        qs = qs.filter(**{f"{groups.HAS[f.has][1]}__gt": 0})
    page = keyset.page(qs, 50, after=f.after, before=f.before, field="last_seen")
    spark_window = window or groups.GROUP_WINDOWS["30d"]
    lines = groups.sparklines(spark_window, now, [g.pk for g in page.rows])
    rows = [groups.GroupRow(g, counts.get(g.pk, {}), lines[g.pk]) for g in page.rows]
    return {"page": page, "rows": rows, "window": window, "spark_window": spark_window}


@requires(VIEW)
@require_GET
def failure_group(request: HttpRequest, pk: int) -> HttpResponse:
    """One group: its numbers, how its failures were routed and ended, who was affected, and
    its latest runs each with how it ended."""
    group = get_visible(request.user, FailureGroup, related=("state_changed_by",), pk=pk)
    now = timezone.now()
    recent = groups.with_endings(
        visible(request.user, Run)
        .filter(signature=group.signature)
        .select_related("workflow")
        .defer(*LIST_DEFER)
        .order_by("-created_at", "-id")
    )[:20]
    names = dict(Workflow.objects.filter(pk__in=group.workflows).values_list("pk", "name"))
    context = {
        "group": group,
        "spark": groups.daily(group, now),
        "runs": list(recent),
        "endings": [(e, getattr(group, groups.ENDING_COLUMNS[e])) for e in groups.Ending],
        "decisions": [(a, getattr(group, c)) for a, c in groups.DECISION_COLUMNS.items()],
        "workflows": [(pk, names.get(pk, "?")) for pk in group.workflows],
        "open_reviews": groups.open_reviews(group),
        "can_review": request.user.has_perm(REVIEW),
        "states": FailureGroup.State,
    }
    return render(request, "dashboard/group_detail.html", context)


@requires(REVIEW)
@require_POST
def failure_group_state(request: HttpRequest, pk: int) -> HttpResponse:
    """Open, mute or resolve a group (audited)."""
    group = get_visible(request.user, FailureGroup, pk=pk)
    state = request.POST.get("state", "")
    if state not in FailureGroup.State.values:
        messages.error(request, f"{state!r} is not a state of a failure group.")
    elif groups.set_state(group, state, request.user):
        messages.success(request, f"Group marked {FailureGroup.State(state).label}.")
    else:
        messages.info(request, f"The group was already {FailureGroup.State(state).label}.")
    return redirect("dashboard:failure_group", pk=group.pk)


# ---------------------------------------------------------------------------------------------
# Review queue


def _signature_counts(items: list[ReviewItem]) -> dict[str, int]:
    signatures = {i.signature for i in items if i.signature}
    if not signatures:
        return {}
    rows = (
        ReviewItem.objects.open()
        .filter(signature__in=signatures)
        .values_list("signature")
        .annotate(n=Count("id"))
        .order_by()
    )
    return dict(rows)


def _decorate(items: list[ReviewItem], user: Any) -> list[ReviewItem]:
    counts = _signature_counts([i for i in items if i.is_pending])
    for item in items:
        item.group_size = counts.get(item.signature, 1) if item.signature else 1
        item.mine = item.assignee_id == user.pk
    return items


REVIEW_RELATED = ("run", "run__workflow", "workflow", "assignee", "resolved_by", "webhook")


@requires("orchestrator.view_reviewitem")
@require_GET
def review_queue(request: HttpRequest) -> HttpResponse:
    """Open items oldest first in keyset pages, filtered by facets with counts; or grouped by
    signature; or the resolved ones, the latest decision first."""
    f = queue.QueueFilter.from_query(request.GET)
    now = timezone.now()
    user = request.user
    items = visible(user, ReviewItem)
    pending = items.filter(state__in=ReviewItem.PENDING)
    context: dict[str, Any] = {
        "f": f,
        "open_total": pending.count(),
        "review_prefix": reverse("dashboard:review_queue"),
        "can_review": user.has_perm(REVIEW),
        "states": queue.STATES,
        "facets": [],
        "page": None,
        "groups": None,
    }
    if not f.errors:
        context |= _queue_results(request, f, items, pending, now)
    template = "dashboard/review_queue.html"
    if _fragment(request):
        template += "#results"
    # A refused filter is the client's mistake (400) on a whole page; htmx swaps only 2xx, so a
    # fragment answers 200 and shows the same errors in place.
    status = 400 if f.errors and not _fragment(request) else 200
    return render(request, template, context, status=status)


def _queue_results(
    request: HttpRequest, f: queue.QueueFilter, items: Any, pending: Any, now: Any
) -> dict[str, Any]:
    user = request.user
    if f.state == "resolved":
        resolved = f.apply(items.filter(state=ReviewItem.State.RESOLVED), user, now)
        page = queue.list_page(resolved.select_related("workflow", "resolved_by"), f)
        _decorate(page.rows, user)
        return {"page": page}
    filtered = f.apply(pending, user, now)
    out: dict[str, Any] = {
        "facets": queue.facets(pending, f, user, now, request.GET),
        "matching": filtered.count() if f.active else None,
    }
    if f.view == "groups":
        groups, total = queue.signature_groups(filtered, user)
        reps = [g.item for g in groups if g.item is not None]
        tried = review.tried_sources(reps)
        for group in groups:
            if group.item is not None:
                key = (group.item.workflow_id, group.item.run.topic)
                group.options = review.group_options(group.item, group.count, tried.get(key))
        folded = FailureGroup.objects.filter(signature__in=[g.signature for g in groups])
        folded_ids = dict(folded.values_list("signature", "pk"))
        for group in groups:
            group.failure_group = folded_ids.get(group.signature)
        return out | {"groups": groups, "group_total": total}
    page = queue.list_page(filtered.select_related("workflow", "assignee"), f)
    _decorate(page.rows, user)
    return out | {"page": page}


def _card_context(
    request: HttpRequest, item: ReviewItem, form: ResolveForm | None = None, notice: str = ""
) -> dict[str, Any]:
    """What the item's card needs: the item, the resolutions that can work, the form."""
    _decorate([item], request.user)
    can_review = request.user.has_perm(REVIEW)
    options = review.resolution_options(item) if can_review and item.is_pending else []
    group = None
    if item.signature:
        group = FailureGroup.objects.filter(signature=item.signature).first()
    return {
        "item": item,
        "review_prefix": reverse("dashboard:review_queue"),
        "options": options,
        "form": form or ResolveForm(options=options),
        "notice": notice,
        "can_review": can_review,
        "failure_group": group,
    }


@requires("orchestrator.view_reviewitem")
@require_GET
def review_item(request: HttpRequest, pk: int) -> HttpResponse:
    """One item's page: the link every other page gives (run, workflow, tiles, alerts)."""
    item = get_visible(request.user, ReviewItem, related=REVIEW_RELATED, pk=pk)
    context = _card_context(request, item)
    if _fragment(request) and request.GET.get("part") == "card":
        return render(request, "dashboard/_review_card.html", context)
    context |= _neighbours(request, item) | {"expanded": True}
    return render(request, "dashboard/review_item.html", context)


def _neighbours(request: HttpRequest, item: ReviewItem) -> dict[str, Any]:
    """The open items just older and just newer than this one, in the queue's order."""
    pending = visible(request.user, ReviewItem).filter(state__in=ReviewItem.PENDING)
    key = (item.created_at, item.pk)
    older = keyset.beyond(pending, key, "created_at", descending=True)
    newer = keyset.beyond(pending, key, "created_at", descending=False)
    return {
        "older": older.order_by("-created_at", "-id").values_list("pk", flat=True).first(),
        "newer": newer.order_by("created_at", "id").values_list("pk", flat=True).first(),
        "waiting_before": older.count() if item.is_pending else None,
    }


def _item_response(
    request: HttpRequest, item: ReviewItem, form: ResolveForm | None = None, notice: str = ""
) -> HttpResponse:
    """The item's card with its queue row refreshed (htmx), or a redirect (plain form post)."""
    if not _fragment(request):
        if notice:
            messages.info(request, notice)
        return redirect(_safe_next(request, reverse("dashboard:review_item", args=[item.pk])))
    item = get_visible(request.user, ReviewItem, related=REVIEW_RELATED, pk=item.pk)
    context = _card_context(request, item, form, notice) | {"oob": True}
    return render(request, "dashboard/_review_card.html", context)


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
    """Resolve one item, or with `apply_to_group` every item like it that no one else holds.

    Only a resolution that can work is accepted (`review.resolution_options`): a switch with no
    other source left is refused with the reason, never recorded to do nothing.
    """
    item = get_visible(request.user, ReviewItem, related=REVIEW_RELATED, pk=pk)
    if item.state == ReviewItem.State.CLAIMED and item.assignee_id != request.user.pk:
        # Whoever claimed it decides; a stale form from another operator must not win.
        return _item_response(request, item, notice=_already(item))
    if not item.is_pending:
        return _item_response(request, item, notice=_already(item))
    form = ResolveForm(request.POST, options=review.resolution_options(item))
    if not form.is_valid():
        if not _fragment(request):
            messages.error(request, "The resolution was not saved: " + form.errors.as_text())
        return _item_response(request, item, form=form)
    data = form.cleaned_data
    try:
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
    label = ReviewItem.Resolution(data["resolution"]).label
    extra = f" and {resolved - 1} more with the same signature" if resolved > 1 else ""
    notice = f"Resolved{extra} ({label}): the coordinator continues."
    return _item_response(request, item, notice=notice)


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
    if _fragment(request) and request.GET.get("part") == "history":
        return render(
            request, "dashboard/policies.html#history", {"history": _history(request.user)}
        )
    if _fragment(request) and request.GET.get("part") == "versions":
        context = {
            "versions": _versions(request.user),
            "policy_version": _policy_version(),
            "can_edit": request.user.has_perm(EDIT_POLICIES),
        }
        return render(request, "dashboard/policies.html#versions", context)
    if _fragment(request) and request.GET.get("part") == "version":
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
        result = dryrun.dry_run([form.instance.snapshot()], days=_days(request))
        result["rows"] = [
            (label, result["current"][key], result["proposed"][key], result["difference"][key])
            for key, label in DRY_RUN_FIGURES
        ]
    if _fragment(request):
        context = {"dry_run": result, "policy_form": form, "policy": policy}
        return render(request, "dashboard/policies.html#dry-run", context)
    return _policies_page(request, editing=policy.pk, policy_form=form, dry_run=result)


@requires(EDIT_POLICIES)
@require_POST
def policy_restore(request: HttpRequest, version: int) -> HttpResponse:
    """Restore version N as version N+1, audited with the note given."""
    if not PolicyVersion.objects.filter(version=version).exists():
        raise Http404
    note = (request.POST.get("note") or "").strip()[:300] or f"restored version {version}"
    restored = restore_policy_version(version, request.user, note)
    messages.success(request, f"Version {version} restored as version {restored.version}.")
    return redirect(reverse("dashboard:policies") + "#versions")


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


# ---------------------------------------------------------------------------------------------
# Analytics: switch efficacy, the retry audit


def _table_csv(name: str, rows: list[dict[str, Any]]) -> StreamingHttpResponse:
    header = list(rows[0]) if rows else ["empty"]
    lines = export.csv_lines(header, ([row[k] for k in header] for row in rows))
    return _download(lines, "csv", name)


@requires(VIEW)
@require_GET
def switch_efficacy(request: HttpRequest) -> HttpResponse:
    """From-source to to-source: how often a switch worked, its added latency, partial results
    kept; overall or for one failure type. `format=csv` downloads every cell."""
    errors: list[str] = []
    ftype = canonical_failure_type(request.GET.get("failure_type", ""), errors)
    # The copy beat refreshes every 150 s (the coordinator's); computed here only before its
    # first refresh.
    cells = efficacy.matrix() or efficacy.compute()
    if request.GET.get("format") == "csv":
        return _table_csv("switch-efficacy", [c.as_row() for c in cells.values()])
    chosen = {k: c for k, c in cells.items() if k[2] == ftype}
    sources_from = sorted({k[0] for k in chosen})
    sources_to = sorted({k[1] for k in chosen})
    grid = [(src, [chosen.get((src, dst, ftype)) for dst in sources_to]) for src in sources_from]
    context = {
        "grid": grid,
        "sources_to": sources_to,
        "failure_type": ftype,
        "failure_types": FailureType.choices,
        "errors": errors,
        "days": settings.SWITCH_EFFICACY_DAYS,
        "ordering": settings.SWITCH_EFFICACY_ORDERING,
        "least": settings.SWITCH_EFFICACY_MIN_SWITCHES,
    }
    return render(request, "dashboard/efficacy.html", context, status=400 if errors else 200)


@requires(VIEW)
@require_GET
def retry_audit(request: HttpRequest) -> HttpResponse:
    """Where the retry signal was wrong, by source, type and signal, each row one click from a
    prefilled provider override."""
    days = _days_param(request.GET.get("days"), retryable.DEFAULT_DAYS)
    futile_rows = retryable.futile(days)
    stuck_rows = retryable.never_recovered(days)
    if request.GET.get("format") == "csv":
        rows = [{"list": "futile", **r.as_row()} for r in futile_rows]
        rows += [{"list": "never_recovered", **r.as_row()} for r in stuck_rows]
        return _table_csv("retry-audit", rows)
    new_override = reverse("dashboard:override_new")
    context = {
        "days": days,
        "futile": [(r, _prefill(new_override, r)) for r in futile_rows],
        "stuck": [(r, _prefill(new_override, r)) for r in stuck_rows],
        "least": settings.RETRY_AUDIT_MIN_RETRIES,
        "can_edit": request.user.has_perm(EDIT_POLICIES),
    }
    return render(request, "dashboard/retry_audit.html", context)


def _prefill(base: str, row: retryable.AuditRow) -> str:
    return f"{base}?{urlencode(row.override_initial())}#overrides"


def _days_param(raw: str | None, default: float) -> float:
    try:
        days = float(raw) if raw else default
    except ValueError:
        return default
    return min(max(days, 1.0), 90.0) if days == days else default


# ---------------------------------------------------------------------------------------------
# Service-level objectives

BURN_WINDOWS = ((5, "5 min"), (30, "30 min"), (60, "1 h"), (360, "6 h"))


def _slo_row(o: slo.Objective) -> dict[str, Any]:
    return {
        "kind": o.kind,
        "name": o.name,
        "objective": o.objective,
        "runs": o.total,
        "succeeded": o.good,
        "success_rate": None if o.success_rate is None else round(o.success_rate, 5),
        "error_budget_remaining": round(o.budget_remaining, 4),
        **{f"burn_rate_{m}m": round(o.burn_rate(m), 3) for m, _ in BURN_WINDOWS},
        "alerts": " ".join(o.alerts),
    }


@requires(VIEW)
@require_GET
def slos(request: HttpRequest) -> HttpResponse:
    """A tile per agent and per source: its objective, success over the SLO window, the error
    budget left, burn rates and which multi-window alert burns. `format=csv` for the table."""
    found = slo.objectives()
    if request.GET.get("format") == "csv":
        return _table_csv("slos", [_slo_row(o) for o in found])
    context = {
        "tiles": [(o, [(label, o.burn_rate(m)) for m, label in BURN_WINDOWS]) for o in found],
        "days": settings.SLO_WINDOW_DAYS,
        "objective": settings.SLO_OBJECTIVE,
        "fast": slo.FAST,
        "slow": slo.SLOW,
    }
    return render(request, "dashboard/slos.html", context)
