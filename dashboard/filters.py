"""The runs page's filters, read from the query string, and its keyset pagination.

Every filter lives in the URL, so a filtered view is shareable and the back button works. Each
filter maps onto an indexed column (see the indexes on Run); the free-text search is the one
that cannot use an index, so it is bounded to a time window (24 h by default, 7 days at most).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.http import QueryDict
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from classifier.taxonomy import UnknownFailureType, parse_failure_type
from dashboard.stats import WINDOWS
from orchestrator import keyset
from orchestrator.models import Run, RunQuerySet

PAGE_SIZE = 50
SEARCH_DEFAULT = timedelta(hours=24)
SEARCH_MAX = timedelta(days=7)
RANGES = {"1h": "last hour", "24h": "last 24 hours", "7d": "last 7 days", "30d": "last 30 days"}
# Named run sets a drill-down may ask for (`?flag=wasted`): each is a RunQuerySet method, the same
# one the tiles count with, so a tile's number and the runs behind it always agree.
FLAGS: dict[str, tuple[str, Callable[[RunQuerySet], RunQuerySet]]] = {
    "retry": ("retries only", RunQuerySet.retries),
    "wasted": ("wasted retries (retries that still failed)", RunQuerySet.wasted_retries),
    "early": ("retries started before their due time", RunQuerySet.early_retries),
    "switched": ("runs on a source switched to", RunQuerySet.switched),
    "partial": ("failures with partial results", RunQuerySet.with_partial_results),
    "empty": ("valid empty results", RunQuerySet.valid_empty),
    "avoided": ("failures not blindly retried", RunQuerySet.avoided_retries),
    "futile": (
        "failures retried although they said a retry cannot help",
        RunQuerySet.futile_retries,
    ),
    "retrying": ("retries waiting for their due time", RunQuerySet.retrying),
    "in_flight": ("runs in flight (started, not finished)", RunQuerySet.in_flight),
}


def _values(params: QueryDict, key: str) -> list[str]:
    """A multi-valued filter: repeated keys and comma-separated values both work."""
    return [v.strip() for raw in params.getlist(key) for v in raw.split(",") if v.strip()]


def _failure_types(names: list[str]) -> list[str]:
    """The canonical names of the failure types asked for, aliases included ("auth_error")."""
    found = []
    for name in names:
        try:
            found.append(parse_failure_type(name).value)
        except UnknownFailureType:
            continue  # an unknown name filters nothing, as any unknown filter value here
    return list(dict.fromkeys(found))


def _trace_id(raw: str) -> str:
    """An OpenTelemetry trace id (32 hex digits, any case), else "" (no filter)."""
    value = raw.strip().lower()
    return value if len(value) == 32 and not value.strip("0123456789abcdef") else ""


def _parse_time(raw: str | None) -> datetime | None:
    if not raw:
        return None
    try:
        value = parse_datetime(raw)
    except ValueError:
        return None
    if value is not None and timezone.is_naive(value):
        value = value.replace(tzinfo=UTC)
    return value


@dataclass
class RunFilter:
    status: list[str] = field(default_factory=list)
    failure_type: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    agent: list[str] = field(default_factory=list)
    workflow: int | None = None
    trace_id: str = ""
    range: str = ""
    since: datetime | None = None
    until: datetime | None = None
    q: str = ""
    flags: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    @classmethod
    def from_query(cls, params: QueryDict, now: datetime | None = None) -> RunFilter:
        now = now or timezone.now()
        statuses = set(Run.Status.values)
        workflow = params.get("workflow", "")
        f = cls(
            status=[s for s in _values(params, "status") if s in statuses],
            failure_type=_failure_types(_values(params, "failure_type")),
            source=_values(params, "source")[:20],
            agent=_values(params, "agent")[:20],
            workflow=int(workflow) if workflow.isdigit() else None,
            trace_id=_trace_id(params.get("trace_id", "")),
            range=params.get("range", "") if params.get("range") in RANGES else "",
            since=_parse_time(params.get("since")),
            until=_parse_time(params.get("until")),
            q=params.get("q", "").strip()[:200],
            flags=[x for x in _values(params, "flag") if x in FLAGS],
        )
        f._apply_range(now)
        return f

    def _apply_range(self, now: datetime) -> None:
        # A tile window aligns to whole steps exactly as the tile counted, so the numbers match.
        if self.range in WINDOWS:
            self.since = WINDOWS[self.range].bounds(now)[1]
        elif self.range == "30d":
            self.since = now - timedelta(days=30)
        if not self.q:
            return
        until = self.until or now
        if self.since is None:
            self.since = until - SEARCH_DEFAULT
            self.notices.append("Search looks at the last 24 hours unless you pick a range.")
        elif until - self.since > SEARCH_MAX:
            self.since = until - SEARCH_MAX
            self.notices.append("Search covers at most 7 days: the range was shortened.")

    def apply(self, qs: RunQuerySet) -> RunQuerySet:
        # The shared filters take one value each; a tile's drill-down may need several.
        many = {"status": self.status, "failure_type": self.failure_type}
        many |= {"source": self.source, "agent": self.agent}
        qs = qs.filtered(
            **{name: values[0] for name, values in many.items() if len(values) == 1},
            workflow=self.workflow,
            trace_id=self.trace_id or None,
            since=self.since,
            until=self.until,
        )
        qs = qs.filter(**{f"{n}__in": v for n, v in many.items() if len(v) > 1})
        for flag in self.flags:
            qs = FLAGS[flag][1](qs)
        if self.q:
            qs = qs.annotate(attempted_text=Cast("attempted", TextField())).filter(
                Q(detail__icontains=self.q) | Q(attempted_text__icontains=self.q)
            )
        return qs

    @property
    def active(self) -> bool:
        return bool(
            self.status
            or self.failure_type
            or self.source
            or self.agent
            or self.workflow
            or self.trace_id
            or self.since
            or self.until
            or self.q
            or self.flags
        )

    @property
    def status_value(self) -> str:
        return ",".join(self.status)

    @property
    def failure_type_value(self) -> str:
        return ",".join(self.failure_type)

    @property
    def flag_labels(self) -> list[str]:
        return [FLAGS[x][0] for x in self.flags]


# ---------------------------------------------------------------------------------------------
# Keyset pagination on (created_at, id), newest first, with the API's cursors: served by the
# created_at indexes and constant-time at any depth, unlike OFFSET.


def decode(cursor: str | None) -> tuple[datetime, int] | None:
    """The key a cursor encodes; None for no cursor or a mangled one (the first page, not a 500)."""
    if not cursor:
        return None
    try:
        return keyset.decode_cursor(cursor)
    except ValueError:
        return None


def run_page(qs: RunQuerySet, cursor: str | None, size: int = PAGE_SIZE) -> tuple[list, str | None]:
    rows, key = qs.keyset_page(size, decode(cursor))
    return rows, keyset.encode_cursor(key) if key else None


def page(qs: QuerySet, cursor: str | None, size: int) -> tuple[list, str | None]:
    """The same keyset page for other models with created_at (the workflows list)."""
    key = decode(cursor)
    if key:
        when, pk = key
        qs = qs.filter(created_at__lte=when).filter(Q(created_at__lt=when) | Q(pk__lt=pk))
    rows = list(qs.order_by("-created_at", "-id")[: size + 1])
    if len(rows) <= size:
        return rows, None
    last = rows[size - 1]
    return rows[:size], keyset.encode_cursor((last.created_at, last.pk))
