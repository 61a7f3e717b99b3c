"""Review items for agents' own coordinators: escalate a run, wait for the resolution, list the
resolutions not picked up yet, acknowledge one.

An item belongs to the token that reported its run (`ReviewItem.token`): that token lists its
items and acknowledges their resolutions. Reading and acting on an item follow `scopes`: a token's
own items and those of the workflows it started, every item with `read:all` (reading) or
`act:all` (escalating another token's run, acknowledging another token's item); any other item
is a 404, as an unknown id is. `?wait=S` on an item answers as soon as it is resolved
(`notify.wait_for`: LISTEN/NOTIFY on PostgreSQL, a bounded poll on SQLite). The rules live in
the models and `orchestrator.coordination` (`escalation.escalate_reported`,
`delivery.resolution_payload`).
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest
from ninja import Query, Router
from ninja.responses import Status

from orchestrator import keyset, notify, scopes
from orchestrator.api import overload
from orchestrator.api.decisions import Absolute, review_ref
from orchestrator.api.errors import (
    ApiError,
    Environ,
    FieldError,
    error_responses,
    invalid,
    not_found_error,
)
from orchestrator.coordination.delivery import resolution_payload
from orchestrator.coordination.escalation import CannotEscalate, escalate_reported
from orchestrator.models import ApiToken, ReviewItem, Run
from orchestrator.schemas import ReviewFilters, ReviewIn, ReviewListOut, ReviewOut, ReviewWait
from orchestrator.vocabulary import Delivery, FailureCategory

router = Router(tags=["reviews"])

RELATED = ("run", "workflow", "resolved_by")


class ReviewCreatedOut(ReviewOut):
    url: str


@router.post(
    "",
    response={200: ReviewCreatedOut, 201: ReviewCreatedOut, **error_responses(404, 409, body=True)},
)
def escalate(request: HttpRequest, payload: ReviewIn) -> Status:
    """Send a failed run to human review: 201 with the new item, or 200 with the item already
    open for that run. The item joins the review queue beside the built-in coordinator's, grouped
    by the failure's signature; its resolution comes back to the token that reported the run.
    Another token's run takes `act:all` (else 404)."""
    answer, created = escalation(request.auth, payload, request.build_absolute_uri)
    return Status(201 if created else 200, answer)


def escalation(
    token: ApiToken, payload: ReviewIn, absolute: Absolute
) -> tuple[dict[str, Any], bool]:
    """`POST /reviews` for `token`: the item, and whether it is new."""
    run = scopes.actionable(token, Run, payload.run)
    if run is None:
        raise not_found_error(f"No run with id {payload.run}.")
    try:
        item, created = escalate_reported(run, payload.reason, token)
    except CannotEscalate as exc:
        raise ApiError(409, FailureCategory.INVALID_INPUT, str(exc)) from None
    item = _item(token, item.pk, act=True)
    return resolution_payload(item) | review_ref(item, absolute), created


@router.get("/{int:item_id}", response={200: ReviewOut, **error_responses(404, 422)})
def get_review(request: HttpRequest, item_id: int, params: Query[ReviewWait]) -> dict[str, Any]:
    """One item and its resolution. With `wait=S` (at most 30) the answer comes as soon as the
    item is resolved, or after S seconds with its state then. Another token's item takes
    `read:all` (else 404)."""
    return review(request.auth, item_id, params.wait, request.META)


def review(token: ApiToken, item_id: int, wait: float, environ: Environ) -> dict[str, Any]:
    """`GET /reviews/{item_id}?wait=` for `token`; `environ` is the WSGI request's whose work
    slot is given back while it waits (`overload.idle`)."""
    item = _item(token, item_id)
    if wait and item.state != ReviewItem.State.RESOLVED:
        resolved = ReviewItem.objects.filter(pk=item_id, state=ReviewItem.State.RESOLVED)
        # Waiting is not work: the server's work slot serves others meanwhile (`overload`), and
        # when too many wait already this one answers the state as it is now.
        with overload.idle(environ) as may_wait:
            if may_wait and notify.wait_for(notify.REVIEW_RESOLVED, item_id, wait, resolved.exists):
                item = _item(token, item_id)
    return resolution_payload(item)


@router.get("", response={200: ReviewListOut, **error_responses(422)})
def list_reviews(request: HttpRequest, filters: Query[ReviewFilters]) -> dict[str, Any]:
    """This token's items (of the runs it reported); `state=resolved&delivered=false` are the
    resolutions its agent has not acknowledged yet, the earliest decision first. With
    `all_tokens=true`, every item the token may read instead (those of the workflows it started;
    with `read:all`, everyone's). `blocking=true` lists the items work waits on (ask for them
    first), `blocking=false` the repairs asked while the work went on on another source; the
    pages keep their order by time, so a cursor stays valid. Pass `next_cursor` back as `cursor`
    for the next page."""
    return reviews_of(request.auth, filters)


def reviews_of(token: ApiToken, filters: ReviewFilters) -> dict[str, Any]:
    """`GET /reviews` for `token`."""
    if filters.all_tokens:
        # Its items and its workflows' items read apart, each from its own index, and merged.
        parts = scopes.visible_parts(token, ReviewItem.objects.all())
    else:
        parts = [ReviewItem.objects.for_token(token)]
    after = None
    if filters.cursor:
        try:
            after = keyset.decode_cursor(filters.cursor)
        except ValueError:
            error = FieldError("cursor", "not a cursor from this API")
            raise invalid("Invalid cursor.", [error]) from None
    pages = []
    for part in parts:
        qs, field = _listed(part, filters)
        if after is not None:
            qs = keyset.beyond(qs, after, field, descending=False)
        pages.append(qs.order_by(field, "id"))
    size = filters.limit + 1
    if len(pages) == 1:
        rows = list(pages[0].select_related(*RELATED)[:size])
    else:
        # The parts' keys alone, merged, then the page's items with their relations: joined in
        # each part, the relations led PostgreSQL to read every item to find a workflow's few.
        keys = [list(page.values_list(field, "id")[:size]) for page in pages]
        ids = [pk for _, pk in keyset.merged(keys, size, tuple, descending=False)]
        found = ReviewItem.objects.select_related(*RELATED).in_bulk(ids)
        rows = [found[pk] for pk in ids if pk in found]
    more = len(rows) > filters.limit
    rows = rows[: filters.limit]
    cursor = keyset.encode_cursor((getattr(rows[-1], field), rows[-1].pk)) if more else None
    return {"items": [resolution_payload(item) for item in rows], "next_cursor": cursor}


def _listed(qs: QuerySet, filters: ReviewFilters) -> tuple[QuerySet, str]:
    """The filtered items and the time their pages are ordered by (decisions by their time)."""
    if filters.state is not None:
        qs = qs.filter(state=filters.state)
    if filters.delivered is not None:
        qs = qs.filter(delivered_at__isnull=not filters.delivered)
    if filters.blocking is not None:
        qs = qs.filter(blocking=filters.blocking)
    resolved_only = filters.state == ReviewItem.State.RESOLVED
    return qs, "resolved_at" if resolved_only else "created_at"


@router.post("/{int:item_id}/ack", response={200: ReviewOut, **error_responses(404, 409)})
def acknowledge(request: HttpRequest, item_id: int) -> dict[str, Any]:
    """Mark this item's resolution picked up by the agent: it leaves the unacknowledged list.
    Repeating it changes nothing (the first pick-up's time stays). Another token's item takes
    `act:all` (else 404); an item of the built-in coordinator's is applied by it (409)."""
    return acknowledgement(request.auth, item_id)


def acknowledgement(token: ApiToken, item_id: int) -> dict[str, Any]:
    """`POST /reviews/{item_id}/ack` for `token`."""
    item = _item(token, item_id, act=True)
    if item.token_id is None:
        raise ApiError(
            409,
            FailureCategory.INVALID_INPUT,
            f"Review item {item_id} is the built-in coordinator's: it applies the resolution.",
        )
    if item.state != ReviewItem.State.RESOLVED:
        raise ApiError(
            409,
            FailureCategory.INVALID_INPUT,
            f"Review item {item_id} is {item.state}: only a resolution is acknowledged.",
            alternatives=[f"wait for it: GET /reviews/{item_id}?wait=30"],
        )
    item.acknowledge(Delivery.ACK)
    return resolution_payload(item)


def _item(token: ApiToken, item_id: int, act: bool = False) -> ReviewItem:
    """The item if the token may read it (with `act`, act on it); else 404 as for no item."""
    find = scopes.actionable if act else scopes.readable
    item = find(token, ReviewItem, item_id, *RELATED)
    if item is None:
        raise not_found_error(f"No review item with id {item_id}.")
    return item
