"""The runs page's filters, read from the query string; its total; known source and agent names.

Every filter lives in the URL, so a filtered view is shareable and the back button works. A value
the page cannot use (an unknown status, a date that does not parse, a damaged page link) is
refused with an error shown above the list, never silently dropped: the list would otherwise
show unfiltered runs as if they matched. Each filter maps onto an indexed column (see the indexes
on Run). Source and agent match by prefix, resolved against the known names into an exact
`IN (…)` that the (source, created_at) and (agent, created_at) indexes serve; the free-text
search is served by trigram indexes on PostgreSQL (`search`) and still bounded to a time window
(24 h by default, 7 days at most), which keeps a common word's matches few and SQLite's scan
short.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.core.cache import cache
from django.db import OperationalError, connection, transaction
from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.http import QueryDict
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from classifier.taxonomy import UnknownFailureType, parse_failure_type
from insights.models import FailureGroup
from insights.stats import WINDOWS
from orchestrator import keyset
from orchestrator import search as run_search
from orchestrator.models import Run, RunQuerySet

PAGE_SIZE = 50
SEARCH_DEFAULT = timedelta(hours=24)
SEARCH_MAX = timedelta(days=7)
RANGES = {"1h": "last hour", "24h": "last 24 hours", "7d": "last 7 days", "30d": "last 30 days"}
# Counted exactly up to here; above it, PostgreSQL's planner estimates (labelled "about"). The
# count visits each matching row, scattered over the table when filters combine (a source and an
# agent): 10,000 of them cost ~80 ms at a million runs, 1,000 about 10.
EXACT_TOTAL = 1_000
# ... and only while that count takes at most this long: a combination of filters that few runs
# match has to be looked for among many (a source and an agent over all time: 26 ms at 10M runs;
# a rarer pair, a scan of every partition). Past the budget the count is cancelled and the
# total is the planner's estimate, labelled so (PostgreSQL; SQLite always counts).
COUNT_BUDGET_MS = 15
QUERY_CANCELED = "57014"  # PostgreSQL's SQLSTATE for a statement cancelled by its timeout
# Known names listed for prefix matching and the input's suggestions; past this many, a prefix
# is matched with LIKE instead (correct, but not served by the index on every collation).
KNOWN_NAMES_MAX = 500
KNOWN_NAMES_SECONDS = 60
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


def canonical_failure_type(name: str, errors: list[str]) -> str:
    """The taxonomy's name for `name` (an alias such as "auth_error" included), or "" with the
    reason added to `errors`; "" for no name. Every dashboard filter reads failure types so."""
    if not name.strip():
        return ""
    try:
        return parse_failure_type(name.strip()).value
    except UnknownFailureType as exc:
        errors.append(str(exc))
        return ""


def _values(params: QueryDict, key: str) -> list[str]:
    """A multi-valued filter: repeated keys and comma-separated values both work."""
    return [v.strip() for raw in params.getlist(key) for v in raw.split(",") if v.strip()]


def _trace_id(raw: str) -> str:
    """An OpenTelemetry trace id (32 hex digits, any case) in lower case, else ""."""
    value = raw.strip().lower()
    return value if len(value) == 32 and not value.strip("0123456789abcdef") else ""


@dataclass
class RunFilter:
    status: list[str] = field(default_factory=list)
    failure_type: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)
    agent: list[str] = field(default_factory=list)
    workflow: int | None = None
    trace_id: str = ""
    group: int | None = None
    signature: str = ""
    range: str = ""
    since: datetime | None = None
    until: datetime | None = None
    q: str = ""
    flags: list[str] = field(default_factory=list)
    after: tuple[datetime, int] | None = None
    before: tuple[datetime, int] | None = None
    notices: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @classmethod
    def from_query(cls, params: QueryDict, now: datetime | None = None) -> RunFilter:
        now = now or timezone.now()
        f = cls(source=_values(params, "source")[:20], agent=_values(params, "agent")[:20])
        f.status = f._choices(params, "status", Run.Status.values)
        f.failure_type = f._failure_types(_values(params, "failure_type"))
        f.flags = f._choices(params, "flag", list(FLAGS))
        f.range = (f._choices(params, "range", list(RANGES)) or [""])[0]
        f.workflow = f._number(params, "workflow", "a workflow id")
        f.group = f._number(params, "group", "a failure group id")
        f.trace_id = f._trace(params)
        f.since = f._time(params, "since")
        f.until = f._time(params, "until")
        f.after = f._cursor(params, "after")
        f.before = f._cursor(params, "before")
        f.q = params.get("q", "").strip()[:200]
        if f.group is not None:
            group = FailureGroup.objects.filter(pk=f.group).values_list("signature", flat=True)
            f.signature = group.first() or ""
            if not f.signature:
                f.errors.append(f"There is no failure group #{f.group}.")
        if f.since and f.until and f.since >= f.until:
            f.errors.append("“From” must come before “To”.")
        f._apply_range(now)
        return f

    def _choices(self, params: QueryDict, key: str, allowed: list[str]) -> list[str]:
        values = _values(params, key)
        wrong = [v for v in values if v not in allowed]
        if wrong:
            self.errors.append(
                f"{key.replace('_', ' ')} {', '.join(map(repr, wrong))} is not one of: "
                f"{', '.join(allowed)}."
            )
        return [v for v in values if v in allowed]

    def _failure_types(self, names: list[str]) -> list[str]:
        """The canonical names of the failure types asked for, aliases included ("auth_error");
        a name in neither the taxonomy nor its alias table is refused with the reason."""
        found = [canonical_failure_type(name, self.errors) for name in names]
        return list(dict.fromkeys(name for name in found if name))

    def _trace(self, params: QueryDict) -> str:
        raw = params.get("trace_id", "").strip()
        value = _trace_id(raw)
        if raw and not value:
            self.errors.append(f"trace id {raw!r} is not a trace id (32 hex digits).")
        return value

    def _number(self, params: QueryDict, key: str, what: str) -> int | None:
        raw = params.get(key, "").strip()
        if not raw:
            return None
        if raw.isdigit() and int(raw) < 2**63:
            return int(raw)
        self.errors.append(f"{key} {raw!r} is not {what} (a number).")
        return None

    def _time(self, params: QueryDict, key: str) -> datetime | None:
        raw = params.get(key, "").strip()
        if not raw:
            return None
        try:
            value = parse_datetime(raw)
        except ValueError:
            value = None
        if value is None:
            label = {"since": "From", "until": "To"}[key]
            self.errors.append(f"“{label}” {raw!r} is not a date and time (YYYY-MM-DDTHH:MM).")
            return None
        return value.replace(tzinfo=UTC) if timezone.is_naive(value) else value

    def _cursor(self, params: QueryDict, key: str) -> tuple[datetime, int] | None:
        raw = params.get(key, "")
        if not raw:
            return None
        try:
            return keyset.decode_cursor(raw)
        except ValueError:
            self.errors.append("This page link is damaged: start again from the newest runs.")
            return None

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
        many = {"status": self.status, "failure_type": self.failure_type}
        qs = qs.filtered(
            **{name: values[0] for name, values in many.items() if len(values) == 1},
            workflow=self.workflow,
            trace_id=self.trace_id or None,
            since=self.since,
            until=self.until,
        )
        qs = qs.filter(**{f"{n}__in": v for n, v in many.items() if len(v) > 1})
        for column in ("source", "agent"):
            if prefixes := getattr(self, column):
                qs = qs.filter(prefix_condition(column, prefixes))
        if self.signature:
            qs = qs.filter(signature=self.signature)
        for flag in self.flags:
            qs = FLAGS[flag][1](qs)
        if self.q:
            qs = search(qs, self.q, self.since, self.until)
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
            or self.group
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

    def unmatched(self) -> list[str]:
        """The source and agent prefixes no known name starts with (said on an empty result)."""
        out = []
        for column in ("source", "agent"):
            names = known_names(column, fresh=True)
            if len(names) > KNOWN_NAMES_MAX:
                continue
            for prefix in getattr(self, column):
                if not matching(names, prefix):
                    out.append(f"No {column} name starts with “{prefix}”.")
        return out


# ---------------------------------------------------------------------------------------------
# Prefix matching on known names


def known_names(column: str, fresh: bool = False) -> list[str]:
    """The distinct values of a run column (source or agent), sorted; at most one more than
    KNOWN_NAMES_MAX. The input's suggestions read them cached for a minute; a filter reads them
    `fresh`, so a name that appeared a second ago is matched.

    A skip scan over the column's index (a recursive query asking for the next name after the
    last one) reads one index entry per name, not one per run: milliseconds at millions of runs.
    """
    key = f"dashboard:known:{column}"
    names = None if fresh else cache.get(key)
    if names is None:
        names = _skip_scan(column, KNOWN_NAMES_MAX + 1)
        cache.set(key, names, KNOWN_NAMES_SECONDS)
    return names


def _skip_scan(column: str, limit: int) -> list[str]:
    quote = connection.ops.quote_name
    col, table = quote(Run._meta.get_field(column).column), quote(Run._meta.db_table)
    query = (
        f"WITH RECURSIVE names(name) AS ("
        f" SELECT min({col}) FROM {table}"
        f" UNION ALL"
        f" SELECT (SELECT min({col}) FROM {table} WHERE {col} > names.name)"
        f" FROM names WHERE names.name IS NOT NULL"
        f") SELECT name FROM names WHERE name IS NOT NULL LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(query, [limit])
        return [row[0] for row in cursor.fetchall()]


def matching(names: list[str], prefix: str) -> list[str]:
    low = prefix.lower()
    return [name for name in names if name.lower().startswith(low)]


def prefix_condition(column: str, prefixes: list[str]) -> Q:
    """Runs whose `column` starts with any of `prefixes` (case-insensitively)."""
    names = known_names(column, fresh=True)
    if len(names) <= KNOWN_NAMES_MAX:
        wanted = sorted({name for prefix in prefixes for name in matching(names, prefix)})
        return Q(**{f"{column}__in": wanted})
    condition = Q()
    for prefix in prefixes:
        condition |= Q(**{f"{column}__istartswith": prefix})
    return condition


# ---------------------------------------------------------------------------------------------
# The total


@dataclass(frozen=True)
class Total:
    """A count of runs: exact, or the planner's estimate, or only "over the cap"."""

    count: int
    exact: bool
    estimated: bool = False
    cap: int = field(default_factory=lambda: EXACT_TOTAL)  # what "exactly up to" meant
    cut: bool = False  # the exact count ran out of its time budget

    @property
    def cap_text(self) -> str:
        return f"{self.cap:,}"

    @property
    def why(self) -> str:
        """What an inexact total rests on (the page's tooltip)."""
        if self.cut:
            return (
                f"Counting these runs one by one takes longer than {COUNT_BUDGET_MS} ms: "
                "this is the database's estimate"
            )
        return f"Counted exactly up to {self.cap_text}; above that the database's estimate"

    def __str__(self) -> str:
        if self.exact:
            return f"{self.count:,}"
        return f"about {self.count:,}" if self.estimated else f"over {self.count - 1:,}"


def total(qs: QuerySet) -> Total:
    """How many runs match: exact up to EXACT_TOTAL (a count that stops there, so it never reads
    more rows than that), estimated above it from PostgreSQL's planner and labelled so.

    Counting every matching row of a million-run table would take longer than the page itself;
    an estimate is what a number that large can honestly be read as anyway. The capped count
    reads the runs in the list's own order (newest first), so PostgreSQL plans it as it plans
    the page, an index scan that stops at the cap. Unordered, it built whole-partition bitmaps
    of each filter before the first row: 160 ms instead of 25 for a source and an agent, 170
    instead of 4 for failed timeouts, at 10M runs.
    """
    capped = _capped_count(qs)
    if capped is not None and capped <= EXACT_TOTAL:
        return Total(capped, True)
    if connection.vendor != "postgresql":
        return Total(EXACT_TOTAL + 1, False)
    plan = json.loads(qs.order_by().values("pk").explain(format="json"))
    estimate = _round(int(plan[0]["Plan"]["Plan Rows"]))
    if capped is None:  # cut short: the estimate is all there is, whatever its size
        return Total(estimate, False, estimated=True, cut=True)
    if estimate <= EXACT_TOTAL:  # the planner guessed low: all we know is "over the cap"
        return Total(EXACT_TOTAL + 1, False)
    return Total(estimate, False, estimated=True)


def _capped_count(qs: QuerySet) -> int | None:
    """The matching runs counted up to EXACT_TOTAL + 1, or None when PostgreSQL cancelled the
    count at COUNT_BUDGET_MS. The budget is set for this statement only (`set_config` local to
    the transaction, the count in a savepoint, then the previous value put back), so a view's
    own transaction keeps its timeout."""
    capped = qs.order_by("-created_at", "-id").values("pk")[: EXACT_TOTAL + 1]
    if connection.vendor != "postgresql":
        return capped.count()
    with connection.cursor() as cursor, transaction.atomic():
        cursor.execute("SELECT current_setting('statement_timeout')")
        (previous,) = cursor.fetchone()
        cursor.execute("SELECT set_config('statement_timeout', %s, true)", [f"{COUNT_BUDGET_MS}ms"])
        try:
            with transaction.atomic():
                return capped.count()
        except OperationalError as exc:
            if getattr(exc.__cause__, "sqlstate", None) != QUERY_CANCELED:
                raise
            return None
        finally:
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", [previous])


def _round(n: int) -> int:
    """Two significant digits: an estimate should not look more precise than it is."""
    digits = len(str(n)) - 2
    return round(n, -digits) if digits > 0 else n


def search(
    qs: RunQuerySet, text: str, since: datetime | None = None, until: datetime | None = None
) -> RunQuerySet:
    """Runs whose detail or attempted call contains `text`, case-insensitively (within the
    window `since`..`until` the caller also filters by, which narrows the index search).

    The test is always the run's own columns (UPPER(column::text) LIKE, as icontains
    compiles). On PostgreSQL a text that few runs of the window contain starts from the search
    table's trigram indexes; one that many contain is found by walking the runs newest first
    (`orchestrator.search.walks`). SQLite scans.
    """
    found = qs.annotate(attempted_text=Cast("attempted", TextField())).filter(
        Q(detail__icontains=text) | Q(attempted_text__icontains=text)
    )
    if not run_search.in_use() or run_search.walks(text, since, until):
        return found
    return found.filter(run_search.matching_runs(text, since, until))
