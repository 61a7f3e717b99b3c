"""The runs: the filtered list and its export, the retrying and in-flight pages, bulk actions and a
run's page."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard.access import REVIEW, VIEW, get_visible, project_scope, requires, visible
from dashboard.filters import (
    PAGE_SIZE,
    RANGES,
    RunExport,
    RunFilters,
    Total,
    names_within,
    total,
)
from dashboard.forms import BulkActionForm
from dashboard.views.common import (
    ATTEMPTS_SHOWN,
    LIST_DEFER,
    download,
    poll_seconds,
    safe_next,
    wants_fragment,
)
from insights.models import FailureGroup
from orchestrator import keyset
from orchestrator.analytics import export
from orchestrator.coordination import actions
from orchestrator.models import (
    AuditEntry,
    FailureType,
    Run,
)
from orchestrator.vocabulary import Channel


@requires(VIEW)
@require_GET
def runs(request: HttpRequest) -> HttpResponse:
    """Runs newest first, filtered from the query string, in keyset pages both ways, with their
    total; a filter the page cannot use is shown as an error instead of being ignored."""
    filters = RunFilters(request.GET)
    valid = filters.is_valid()
    context: dict[str, Any] = {
        "filters": filters,
        "page": None,
        "runs": [],
        "statuses": Run.Status.choices,
        "any_failure": ",".join(Run.FAILURE),
        "failure_types": FailureType.choices,
        "ranges": RANGES.items(),
        "can_review": request.user.has_perm(REVIEW),
        # The suggestions name only what the projects the page shows hold.
        "known_sources": names_within("source", project_scope(request.user))[0],
        "known_agents": names_within("agent", project_scope(request.user))[0],
        # Row links built from one prefix instead of a reverse() per row.
        "runs_prefix": reverse("dashboard:runs"),
        "workflows_prefix": reverse("dashboard:workflows"),
    }
    if valid:
        context |= _runs_results(request, filters)
    template = "dashboard/runs.html#results" if wants_fragment(request) else "dashboard/runs.html"
    # A refused filter is a 400 on a whole page; htmx swaps only 2xx, so a fragment answers 200.
    status = 400 if not valid and not wants_fragment(request) else 200
    return render(request, template, context, status=status)


@requires(VIEW)
@require_GET
def runs_export(request: HttpRequest) -> HttpResponse:
    """The runs list's filters as a download: CSV (`format=csv`) or JSON Lines (`format=jsonl`),
    streamed over keyset pages, every matching run (the list's page cursors are ignored)."""
    filters = RunExport(request.GET)
    if not filters.is_valid():
        text = "\n".join(filters.error_texts) + "\n"
        return HttpResponse(text, status=400, content_type="text/plain")
    fmt = filters.cleaned_data["format"]
    matching = filters.apply(visible(request.user, Run))
    return download(export.runs_export(matching, fmt), fmt, "runs")


@requires(VIEW)
@require_GET
def runs_total(request: HttpRequest) -> HttpResponse:
    """How many runs the list's filters match: the runs page asks once it is shown (htmx), so
    a count that reads many rows never holds the list back."""
    filters = RunFilters(request.GET)
    if not filters.is_valid():  # the list shows the errors; a total of nothing adds nothing
        return HttpResponse("")
    matching = filters.apply(visible(request.user, Run))
    counted = total(matching, filters.cleaned_data["expect"])
    return render(request, "dashboard/_runs_total.html", {"total": counted})


def _runs_results(request: HttpRequest, filters: RunFilters) -> dict[str, Any]:
    matching = filters.apply(visible(request.user, Run))
    qs = matching.select_related("workflow").defer(*LIST_DEFER)
    cursors = {name: filters.cleaned_data[name] for name in ("after", "before")}
    page = keyset.page(qs, PAGE_SIZE, **cursors)
    actions.with_actions(page.rows)
    offered = {a for run in page.rows for a in run.actions}
    # Every match on one page: the total is its length; otherwise the page asks `runs_total`.
    alone = page.previous is None and page.next is None
    return {
        "page": page,
        "runs": page.rows,
        "total": Total(len(page.rows), True) if alone else None,
        "bulk_actions": [a for a in actions.RunAction if a in offered],
        "unmatched": [] if page.rows else filters.unmatched(project_scope(request.user)),
        "any_runs": bool(page.rows) or visible(request.user, Run).exists(),
    }


@requires(VIEW)
@require_GET
def retrying(request: HttpRequest) -> HttpResponse:
    """Tasks whose latest attempt failed and whose next retry is scheduled. The page keeps
    refreshing while empty: a retry scheduled a second later must appear without a reload."""
    qs = (
        visible(request.user, Run)
        .retrying()
        .select_related("workflow", "retry_of")
        .defer(*LIST_DEFER)
        .order_by("due_at", "id")
    )
    rows = list(qs[:200])
    context = {"runs": rows, "now": timezone.now(), "poll_seconds": poll_seconds()}
    template = (
        "dashboard/retrying.html#table" if wants_fragment(request) else "dashboard/retrying.html"
    )
    return render(request, template, context)


IN_FLIGHT_SHOWN = 200


@requires(VIEW)
@require_GET
def in_flight(request: HttpRequest) -> HttpResponse:
    """Runs started and not finished, the longest running first: the coordinator's (held by a
    worker's lease) and those agents reported as running (their agent finishes them, or the
    sweeper at their running deadline)."""
    matching = visible(request.user, Run).in_flight()
    rows = list(
        matching.select_related("workflow", "token")
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
        "dashboard/in_flight.html#table" if wants_fragment(request) else "dashboard/in_flight.html"
    )
    return render(request, template, context)


@requires(REVIEW)
@require_POST
def run_actions(request: HttpRequest) -> HttpResponse:
    """Retry, cancel or escalate the selected runs. A cancel or an action on several runs first
    asks to confirm (a second post with `confirmed`); one run's retry or escalation does not."""
    back = safe_next(request, reverse("dashboard:runs"))
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
    done = actions.do_run_action(
        action, ids, request.user, channel=Channel.DASHBOARD, reason=data["reason"]
    )
    skipped = len(data["run"]) - done
    text = f"{action.label.capitalize()}: {done} run{'s' if done != 1 else ''} done"
    if skipped:
        text += f", {skipped} skipped (already finished, moved on, not found, or their task "
        text += "succeeded or is running)"
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
    actions.with_actions(rows)
    applies = [run for run in rows if action in run.actions]
    skipped = [run for run in rows if action not in run.actions]
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
    runs = visible(request.user, Run)
    run = get_visible(request.user, Run, related=("workflow", "retry_of", "switched_from"), pk=pk)
    attempts = list(runs.attempts_of(run).defer(*LIST_DEFER)[:ATTEMPTS_SHOWN])
    group = FailureGroup.objects.filter(signature=run.signature).first() if run.signature else None
    context = {
        "run": run,
        "attempts": _with_waits(attempts),
        "next_attempt": _next_attempt(run, attempts),
        "replaced_by": runs.replacement_of(run) if run.decision else None,
        "decided_by_operator": _decided_by_operator(run),
        "review_items": run.review_items.select_related(
            "resolved_by", "assignee", "workflow", "webhook"
        ).prefetch_related("webhook__tries"),
        "can_review": request.user.has_perm(REVIEW),
        "run_actions": actions.with_actions([run])[0].actions,
        "failure_group": group,
        "now": timezone.now(),
    }
    return render(request, "dashboard/run_detail.html", context)


# An operator's action on a run, by the decision it leaves on the run.
OPERATOR_ACTIONS = {"run.retry": "retry", "run.cancel": "abort", "run.escalate": "escalate"}


def _decided_by_operator(run: Run) -> AuditEntry | None:
    """The audited operator action that made `run`'s decision, if one did (not the policy)."""
    if not run.decision:
        return None
    made = [name for name, decision in OPERATOR_ACTIONS.items() if decision == run.decision]
    entries = AuditEntry.objects.filter(object_type="run", object_id=str(run.pk), action__in=made)
    return entries.order_by("-created_at", "-id").first()


def _next_attempt(run: Run, attempts: list[Run]) -> Run | None:
    """The attempt that followed `run` in its task, if it has been created."""
    return next((a for a in attempts if a.attempt == run.attempt + 1), None)


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
