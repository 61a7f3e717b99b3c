"""Keyset pagination over (a timestamp, id), shared by the API and the dashboard: opaque cursors
(base64url of "<ISO timestamp>|<id>", trivial to debug) and pages in both directions."""

from __future__ import annotations

import base64
import binascii
import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q, QuerySet


def encode_cursor(key: tuple[datetime, int]) -> str:
    created_at, pk = key
    raw = f"{created_at.isoformat()}|{pk}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    """Return the (created_at, id) key a cursor encodes; ValueError if it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, pk = raw.split("|")
        created_at = datetime.fromisoformat(stamp)
        key = int(pk)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise ValueError("not a cursor from this API") from exc
    if created_at.tzinfo is None or not 1 <= key < 2**63:
        raise ValueError("not a cursor from this API")
    return created_at, key


@dataclass
class Page:
    """One keyset page in display order, with the cursors of its neighbours (None: no more)."""

    rows: list[Any]
    previous: str | None
    next: str | None

    @property
    def first(self) -> bool:
        return self.previous is None


def _key(row: Any, field: str) -> tuple[datetime, int]:
    return getattr(row, field), row.pk


def merged(
    pages: Iterable[Iterable[Any]],
    size: int,
    key: Callable[[Any], tuple[datetime, int]],
    descending: bool = True,
) -> list[Any]:
    """The first `size` rows of the union of `pages`, each a page of the same order by `key`
    ((a timestamp, id)) after the same key: a row in two of them is taken once. The union's
    first `size` rows are among its parts' first `size` each, so parts' pages of `size` rows
    make its page."""
    rows: list[Any] = []
    seen: set[tuple[datetime, int]] = set()
    for row in heapq.merge(*pages, key=key, reverse=descending):
        if (found := key(row)) not in seen:
            seen.add(found)
            rows.append(row)
            if len(rows) == size:
                break
    return rows


def beyond(qs: QuerySet, key: tuple[datetime, int], field: str, descending: bool) -> QuerySet:
    """Return the rows after `key` in the order (field, id), descending or ascending.

    The redundant bound on `field` alone gives the planner an index range to start from.
    """
    when, pk = key
    if descending:
        return qs.filter(**{f"{field}__lte": when}).filter(
            Q(**{f"{field}__lt": when}) | Q(pk__lt=pk)
        )
    return qs.filter(**{f"{field}__gte": when}).filter(Q(**{f"{field}__gt": when}) | Q(pk__gt=pk))


def page(
    qs: QuerySet,
    size: int,
    *,
    after: tuple[datetime, int] | None = None,
    before: tuple[datetime, int] | None = None,
    field: str = "created_at",
    descending: bool = True,
) -> Page:
    """Return a page of `size` rows ordered by (field, id), after `after` or before `before`."""
    order = (f"-{field}", "-id") if descending else (field, "id")
    back = (field, "id") if descending else (f"-{field}", "-id")
    if before is not None:
        rows = list(beyond(qs, before, field, not descending).order_by(*back)[: size + 1])
        more_before = len(rows) > size
        rows = rows[:size][::-1]
        more_after = bool(rows) and beyond(qs, _key(rows[-1], field), field, descending).exists()
    else:
        start = beyond(qs, after, field, descending) if after is not None else qs
        rows = list(start.order_by(*order)[: size + 1])
        more_after = len(rows) > size
        rows = rows[:size]
        more_before = after is not None and (
            not rows or beyond(qs, _key(rows[0], field), field, not descending).exists()
        )
    return Page(
        rows=rows,
        previous=encode_cursor(_key(rows[0], field)) if rows and more_before else None,
        next=encode_cursor(_key(rows[-1], field)) if rows and more_after else None,
    )
