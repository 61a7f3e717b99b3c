"""The review queue: open items in keyset pages with facets or grouped by signature, an item's
card, claiming and resolving."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from dashboard import queue
from dashboard.access import REVIEW, get_visible, in_scope, requires, visible
from dashboard.forms import ResolveForm
from dashboard.views.common import safe_next, wants_fragment
from insights.models import FailureGroup
from orchestrator import keyset
from orchestrator.coordination import actions, owners, review
from orchestrator.models import ReviewItem
from orchestrator.vocabulary import Channel


def _signature_counts(items: list[ReviewItem], user: Any) -> dict[str, int]:
    signatures = {i.signature for i in items if i.signature}
    if not signatures:
        return {}
    rows = (
        in_scope(user, ReviewItem.objects.open())
        .filter(signature__in=signatures)
        .values_list("signature")
        .annotate(n=Count("id"))
        .order_by()
    )
    return dict(rows)


def _decorate(items: list[ReviewItem], user: Any) -> list[ReviewItem]:
    counts = _signature_counts([i for i in items if i.is_pending], user)
    for item in items:
        item.group_size = counts.get(item.signature, 1) if item.signature else 1
        item.mine = item.assignee_id == user.pk
    return items


REVIEW_RELATED = (
    "run",
    "run__workflow",
    "workflow",
    "assignee",
    "resolved_by",
    "webhook",
    "owner_group__next_group",
)


@requires("orchestrator.view_reviewitem")
@require_GET
def review_queue(request: HttpRequest) -> HttpResponse:
    """Open items oldest first in keyset pages, filtered by facets with counts; or grouped by
    signature; or the resolved ones, the latest decision first."""
    f = queue.QueueFilters(request.GET)
    valid = f.is_valid()
    now = timezone.now()
    user = request.user
    items = visible(user, ReviewItem)
    pending = items.filter(state__in=ReviewItem.PENDING)
    context: dict[str, Any] = {
        "f": f,
        "open_total": None,  # counted with the facets when they are
        "review_prefix": reverse("dashboard:review_queue"),
        "can_review": user.has_perm(REVIEW),
        "states": queue.STATES,
        "facets": [],
        "page": None,
        "groups": None,
    }
    if valid:
        context |= _queue_results(request, f, items, pending, now)
    if context["open_total"] is None:
        context["open_total"] = pending.count()
    template = "dashboard/review_queue.html"
    if wants_fragment(request):
        template += "#results"
    # A refused filter is a 400 on a whole page; htmx swaps only 2xx, so a fragment answers 200.
    status = 400 if not valid and not wants_fragment(request) else 200
    return render(request, template, context, status=status)


def _queue_results(
    request: HttpRequest, f: queue.QueueFilters, items: Any, pending: Any, now: Any
) -> dict[str, Any]:
    user = request.user
    if f.cleaned_data["state"] == "resolved":
        resolved = f.apply(items.filter(state=ReviewItem.State.RESOLVED), user, now)
        page = queue.list_page(resolved.select_related("workflow", "resolved_by"), f)
        _decorate(page.rows, user)
        matching = resolved.count() if f.active else None
        pickup = ReviewItem.pickup_timeout().total_seconds()
        return {"page": page, "matching": matching, "pickup_timeout": pickup}
    filtered = f.apply(pending, user, now)
    facets, open_total = queue.facets(pending, f, user, now, request.GET)
    matching = None
    if f.active:
        matching = queue.chosen_count(facets)
        matching = filtered.count() if matching is None else matching
    out: dict[str, Any] = {"facets": facets, "open_total": open_total, "matching": matching}
    if f.cleaned_data["view"] == "groups":
        # Each group's resolve form loads when opened (`review_item` with part=group).
        groups, total = queue.signature_groups(filtered, user)
        folded = visible(user, FailureGroup).filter(signature__in=[g.signature for g in groups])
        folded_ids = dict(folded.values_list("signature", "pk"))
        for group in groups:
            group.failure_group = folded_ids.get(group.signature)
        here = quote(request.get_full_path(), safe="")
        # A group's link is this prefix and its id: one reverse() instead of one per group.
        prefix = reverse("dashboard:failure_groups")
        return out | {
            "groups": groups,
            "group_total": total,
            "group_next": here,
            "groups_prefix": prefix,
        }
    rows = filtered.select_related("workflow", "assignee").defer(*queue.ROW_DEFER)
    page, repairs_after = queue.blocked_first(rows, f)
    _decorate(page.rows, user)
    return out | {"page": page, "repairs_after": repairs_after}


def _card_context(
    request: HttpRequest, item: ReviewItem, form: ResolveForm | None = None, notice: str = ""
) -> dict[str, Any]:
    """What the item's card needs: the item, the resolutions that can work, the form."""
    _decorate([item], request.user)
    can_review = request.user.has_perm(REVIEW)
    options = review.resolution_options(item) if can_review and item.is_pending else []
    group = None
    if item.signature:
        group = visible(request.user, FailureGroup).filter(signature=item.signature).first()
    return {
        "item": item,
        "review_prefix": reverse("dashboard:review_queue"),
        "options": options,
        "form": form or ResolveForm(options=options),
        "notice": notice,
        "can_review": can_review,
        "failure_group": group,
        "owner_history": owners.events_of(item),
        "fallback": _fallback_label(item),
    }


def _fallback_label(item: ReviewItem) -> str:
    """What the item's deadline applies if no one resolves it: its failure type's fallback under
    the current policy ("" for an item already resolved or with no deadline)."""
    if not (item.is_pending and item.deadline_at):
        return ""
    return ReviewItem.Resolution(review.fallback_of(item)).label


@requires("orchestrator.view_reviewitem")
@require_GET
def review_item(request: HttpRequest, pk: int) -> HttpResponse:
    """One item's page: the link every other page gives (run, workflow, tiles, alerts)."""
    item = get_visible(request.user, ReviewItem, related=REVIEW_RELATED, pk=pk)
    if wants_fragment(request) and request.GET.get("part") == "group":
        return _group_form(request, item)
    context = _card_context(request, item)
    if wants_fragment(request) and request.GET.get("part") == "card":
        return render(request, "dashboard/_review_card.html", context)
    context |= _neighbours(request, item) | {"expanded": True}
    return render(request, "dashboard/review_item.html", context)


def _group_form(request: HttpRequest, item: ReviewItem) -> HttpResponse:
    """The "resolve all like this" form for the group of `item` (its oldest item this operator may
    resolve), or a note when this operator may no longer resolve it."""
    user = request.user
    held = item.state == ReviewItem.State.CLAIMED and item.assignee_id != user.pk
    if not user.has_perm(REVIEW) or not item.is_pending or held or not item.signature:
        message = "This group can no longer be resolved from here: reload the queue."
        return HttpResponse(f'<p class="muted small">{message}</p>')
    group = ReviewItem.objects.with_signature(item.signature).resolvable_by(user)
    count = group.filter(project_id=item.project_id).count()
    tried = review.tried_sources([item]).get((item.workflow_id, item.run.topic))
    context = {
        "item": item,
        "count": count,
        "options": review.group_options(item, count, tried),
        "next": safe_next(request, reverse("dashboard:review_queue") + "?view=groups"),
    }
    return render(request, "dashboard/_group_resolve.html", context)


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
    if not wants_fragment(request):
        if notice:
            messages.info(request, notice)
        return redirect(safe_next(request, reverse("dashboard:review_item", args=[item.pk])))
    item = get_visible(request.user, ReviewItem, related=REVIEW_RELATED, pk=item.pk)
    context = _card_context(request, item, form, notice) | {"oob": True}
    return render(request, "dashboard/_review_card.html", context)


@requires(REVIEW)
@require_POST
def review_claim(request: HttpRequest, pk: int) -> HttpResponse:
    item = get_visible(request.user, ReviewItem, related=("assignee",), pk=pk)
    if actions.do_claim_review(item, request.user, channel=Channel.DASHBOARD):
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
    Only a resolution that can work is accepted (`review.resolution_options`)."""
    item = get_visible(request.user, ReviewItem, related=REVIEW_RELATED, pk=pk)
    if item.state == ReviewItem.State.CLAIMED and item.assignee_id != request.user.pk:
        # Whoever claimed it decides; a stale form from another operator must not win.
        return _item_response(request, item, notice=_already(item))
    if not item.is_pending:
        return _item_response(request, item, notice=_already(item))
    form = ResolveForm(request.POST, options=review.resolution_options(item))
    if not form.is_valid():
        if not wants_fragment(request):
            messages.error(request, "The resolution was not saved: " + form.errors.as_text())
        return _item_response(request, item, form=form)
    data = form.cleaned_data
    try:
        resolved = actions.do_resolve_review(
            item,
            request.user,
            data["resolution"],
            channel=Channel.DASHBOARD,
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
    return _item_response(request, item, notice=f"Resolved{extra} ({label}): {_next_step(item)}")


def _next_step(item: ReviewItem) -> str:
    """Who acts on a resolution: the built-in coordinator at once, or the agent's own one."""
    if item.is_built_in:
        return "the coordinator continues."
    via = "by its webhook or " if item.webhook_or_none else "by "
    return (
        "recorded for the agent's own coordinator, which applies it once it picks it up "
        f"({via}GET /api/v1/reviews/{item.pk})."
    )
