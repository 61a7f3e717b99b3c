"""The runs page's filters (a form read from the query string), its total, known source and agent
names. A value the page cannot use is refused with an error, never dropped: the list would
otherwise show unfiltered runs as if they matched."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db import OperationalError, connection, transaction
from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast
from django.http import QueryDict
from django.utils import timezone

from dashboard.filterforms import (
    ChoiceListField,
    ClippedField,
    CursorField,
    FailureTypesField,
    IdField,
    MomentField,
    OneOfField,
    QueryForm,
    TraceIdField,
    ValuesField,
)
from insights import costs
from insights.models import FailureGroup
from insights.stats import WINDOWS
from orchestrator import search as run_search
from orchestrator.analytics import export
from orchestrator.models import Run, RunQuerySet

PAGE_SIZE = 50
SEARCH_DEFAULT = timedelta(hours=24)
SEARCH_MAX = timedelta(days=7)
RANGES = {"1h": "last hour", "24h": "last 24 hours", "7d": "last 7 days", "30d": "last 30 days"}
# Counted exactly up to here (the count visits each matching row); above it, the planner's estimate.
EXACT_TOTAL = 1_000
# A tile that links to its runs says how many it counted (`expect`): the list counts exactly up to
# a little over that, to this at most (and within COUNT_BUDGET_MS still), so the numbers agree.
EXPECTED_TOTAL_MAX = 200_000
# ... and only while that count takes at most this long: a rare combination of filters is looked
# for among many runs. Past it the count is cancelled (PostgreSQL; SQLite always counts).
COUNT_BUDGET_MS = 15
QUERY_CANCELED = "57014"  # PostgreSQL's SQLSTATE for a statement cancelled by its timeout
# Known names listed for prefix matching and the input's suggestions; past this many, a prefix
# is matched with LIKE instead (correct, but not served by the index on every collation).
KNOWN_NAMES_MAX = 500
KNOWN_NAMES_SECONDS = 60
# Names within some projects: the skip scan steps over the other projects' runs one by one, so
# past this budget it is cancelled and the names are those of the projects' latest runs.
NAMES_WITHIN_BUDGET_MS = 100
LATEST_RUNS_NAMED = timedelta(hours=1)

T = TypeVar("T")
# Drill-downs (`?flag=wasted`): the RunQuerySet methods the tiles count with, so the numbers agree.
FLAGS: dict[str, tuple[str, Callable[[RunQuerySet], RunQuerySet]]] = {
    "retry": ("retries only", RunQuerySet.retries),
    "wasted": ("wasted retries (retries that still failed)", RunQuerySet.wasted_retries),
    "early": (
        "calls started inside their source's Retry-After hold or retries before their due time",
        RunQuerySet.early_retries,
    ),
    "switched": ("runs on a source switched to", RunQuerySet.switched),
    "partial": ("failures with partial results", RunQuerySet.with_partial_results),
    "empty": ("valid empty results", RunQuerySet.valid_empty),
    "avoided": ("failures not blindly retried", RunQuerySet.avoided_retries),
    "futile": (
        "failures retried although they said a retry cannot help",
        RunQuerySet.futile_retries,
    ),
    "refreshed": ("auth failures retried after refreshing the credentials", RunQuerySet.refreshed),
    "retrying": ("retries waiting for their due time", RunQuerySet.retrying),
    "in_flight": ("runs in flight (started, not finished)", RunQuerySet.in_flight),
    # The Costs page's sets (`insights.costs`): each amount there sums the runs its flag lists.
    "priced": ("runs with a cost (in COST_CURRENCY)", costs.priced),
    "wasted_spend": (
        "wasted spend: retries that failed again, and calls that fetched again what a failure "
        "had gathered",
        lambda qs: costs.wasted_spend(qs, None),  # `apply` passes the list's window
    ),
    "avoided_spend": (
        "failures routed elsewhere that status-aware retries (retryable failures only, up to 3 "
        "attempts) would have retried",
        costs.avoided_spend,
    ),
    "reviewed": ("failures escalated to a human", costs.reviewed),
    # The Costs page's "no failure" row (`insights.costs` keys a run without one as "").
    "no_failure": (
        "runs that did not fail (succeeded or unfinished)",
        lambda qs: qs.filter(Q(failure_type="") | Q(failure_type__isnull=True)),
    ),
}
DAMAGED = "This page link is damaged: start again from the newest runs."


class RunFilters(QueryForm):
    """The runs list's filters. Cleaning also resolves a failure group to its signature and
    turns a range, or a search without one, into the window the list is read from."""

    status = ChoiceListField(Run.Status.choices)
    failure_type = FailureTypesField()
    source = ValuesField()
    agent = ValuesField()
    workflow = IdField(what="a workflow id")
    group = IdField(what="a failure group id")
    trace_id = TraceIdField()
    range = OneOfField(choices=RANGES.items())
    since = MomentField(label="From")
    until = MomentField(label="To")
    q = ClippedField(clip=200)
    flag = ChoiceListField([(name, label) for name, (label, _) in FLAGS.items()])
    after = CursorField(error_messages={"invalid": DAMAGED})
    before = CursorField(error_messages={"invalid": DAMAGED})
    expect = IdField(what="a count of runs")  # not a filter: the linking tile's number

    def __init__(self, data: QueryDict | None = None, now: datetime | None = None) -> None:
        super().__init__(data)
        self.now = now or timezone.now()
        self.notices: list[str] = []
        self.signature = ""

    def clean_group(self) -> int | None:
        pk = self.cleaned_data["group"]
        if pk is not None:
            group = FailureGroup.objects.filter(pk=pk).values_list("signature", flat=True)
            self.signature = group.first() or ""
            if not self.signature:
                raise ValidationError(f"There is no failure group #{pk}.")
        return pk

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        since, until = data.get("since"), data.get("until")
        if since and until and since >= until:
            raise ValidationError("“From” must come before “To”.")
        # A tile window aligns to whole steps exactly as the tile counted, so the numbers match.
        if data.get("range") in WINDOWS:
            since = WINDOWS[data["range"]].bounds(self.now)[1]
        elif data.get("range") == "30d":
            since = self.now - timedelta(days=30)
        if data.get("q"):
            end = until or self.now
            if since is None:
                since = end - SEARCH_DEFAULT
                self.notices.append("Search looks at the last 24 hours unless you pick a range.")
            elif end - since > SEARCH_MAX:
                since = end - SEARCH_MAX
                self.notices.append("Search covers at most 7 days: the range was shortened.")
        data["since"] = since
        return data

    def apply(self, qs: RunQuerySet) -> RunQuerySet:
        """The runs these (valid) filters match."""
        data = self.cleaned_data
        many = {"status": data["status"], "failure_type": data["failure_type"]}
        qs = qs.filtered(
            **{name: values[0] for name, values in many.items() if len(values) == 1},
            workflow=data["workflow"],
            trace_id=data["trace_id"] or None,
            since=data["since"],
            until=data["until"],
        )
        qs = qs.filter(**{f"{n}__in": v for n, v in many.items() if len(v) > 1})
        for column in ("source", "agent"):
            if prefixes := data[column]:
                qs = qs.filter(prefix_condition(column, prefixes))
        if data["group"] is not None:
            qs = qs.filter(signature=self.signature)
        for flag in data["flag"]:
            if flag == "wasted_spend":  # found among the failures of the list's window
                qs = costs.wasted_spend(qs, data["since"], self.now)
            else:
                qs = FLAGS[flag][1](qs)
        if data["q"]:
            qs = search(qs, data["q"], data["since"], data["until"])
        return qs

    @property
    def active(self) -> bool:
        """Whether any filter narrows the list (a range does, through `since`)."""
        positions = ("range", "after", "before", "expect")
        return any(
            v not in (None, "", []) for k, v in self.cleaned_data.items() if k not in positions
        )

    @property
    def status_value(self) -> str:
        return ",".join(self.cleaned_data.get("status", []))

    @property
    def failure_type_value(self) -> str:
        return ",".join(self.cleaned_data.get("failure_type", []))

    @property
    def flag_labels(self) -> list[str]:
        return [FLAGS[x][0] for x in self.cleaned_data.get("flag", [])]

    def unmatched(self, projects: tuple[int, ...] | None = None) -> list[str]:
        """The source and agent prefixes no name of `projects`' runs starts with (said on an
        empty result, when those names are known in full)."""
        out = []
        for column in ("source", "agent"):
            names, complete = names_within(column, projects, fresh=True)
            if not complete or len(names) > KNOWN_NAMES_MAX:
                continue
            for prefix in self.cleaned_data[column]:
                if not matching(names, prefix):
                    out.append(f"No {column} name starts with “{prefix}”.")
        return out


class RunExport(RunFilters):
    """The runs list's filters and a download's format; its page cursors are read, not used."""

    format = OneOfField(
        choices=[(name, name) for name in export.FORMATS],
        empty_value="csv",
        error_messages={"invalid_choice": "Unknown export format %(value)s: %(allowed)s."},
    )


# Prefix matching on known names


def known_names(column: str, fresh: bool = False) -> list[str]:
    """The distinct values of a run column, at most KNOWN_NAMES_MAX + 1. Suggestions read them
    cached; a filter reads them `fresh`, so a name that appeared a second ago is matched."""
    key = f"dashboard:known:{column}"
    names = None if fresh else cache.get(key)
    if names is None:
        names = _skip_scan(column, KNOWN_NAMES_MAX + 1)
        cache.set(key, names, KNOWN_NAMES_SECONDS)
    return names


def names_within(
    column: str, projects: tuple[int, ...] | None, fresh: bool = False
) -> tuple[list[str], bool]:
    """The names of `projects`' runs (None: every project's, `known_names`), and whether they
    are all of them: past NAMES_WITHIN_BUDGET_MS, only those of their runs of the last
    LATEST_RUNS_NAMED. Cached per set of projects as `known_names` is."""
    if projects is None:
        return known_names(column, fresh), True
    key = f"dashboard:known:{column}:" + ",".join(map(str, sorted(projects)))
    found = None if fresh else cache.get(key)
    if found is None:
        names = _in_budget(
            lambda: _skip_scan(column, KNOWN_NAMES_MAX + 1, projects), NAMES_WITHIN_BUDGET_MS
        )
        found = (names, True) if names is not None else (_latest_names(column, projects), False)
        cache.set(key, found, KNOWN_NAMES_SECONDS)
    return found


def _latest_names(column: str, projects: tuple[int, ...]) -> list[str]:
    since = timezone.now() - LATEST_RUNS_NAMED
    runs = Run.objects.filter(project_id__in=projects, created_at__gte=since).order_by(column)
    return list(runs.values_list(column, flat=True).distinct()[: KNOWN_NAMES_MAX + 1])


def _skip_scan(column: str, limit: int, projects: tuple[int, ...] | None = None) -> list[str]:
    """A recursive "next name after the last" query: one index entry per name, not per run.
    Within some projects, the runs of a name held by none of them are stepped over one by one."""
    quote = connection.ops.quote_name
    col, table = quote(Run._meta.get_field(column).column), quote(Run._meta.db_table)
    within, params = "", []
    if projects is not None:
        if not projects:
            return []
        project = quote(Run._meta.get_field("project").column)
        within = f"{project} IN ({', '.join(['%s'] * len(projects))})"
        params = list(projects)
    first = f" WHERE {within}" if within else ""
    further = f" AND {within}" if within else ""
    query = (
        f"WITH RECURSIVE names(name) AS ("
        f" SELECT min({col}) FROM {table}{first}"
        f" UNION ALL"
        f" SELECT (SELECT min({col}) FROM {table} WHERE {col} > names.name{further})"
        f" FROM names WHERE names.name IS NOT NULL"
        f") SELECT name FROM names WHERE name IS NOT NULL LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(query, [*params, *params, limit])
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


def total(qs: QuerySet, expect: int | None = None) -> Total:
    """How many runs match: exact up to EXACT_TOTAL (or a little over `expect`, the count a
    linking tile showed), above it PostgreSQL's planner estimate."""
    cap = EXACT_TOTAL
    if expect is not None:
        cap = min(max(cap, expect + expect // 10 + 10), EXPECTED_TOTAL_MAX)
    capped = _capped_count(qs, cap)
    if capped is not None and capped <= cap:
        return Total(capped, True, cap=cap)
    if connection.vendor != "postgresql":
        return Total(cap + 1, False, cap=cap)
    plan = json.loads(qs.order_by().values("pk").explain(format="json"))
    estimate = _round(int(plan[0]["Plan"]["Plan Rows"]))
    if capped is None:  # cut short: the estimate is all there is, whatever its size
        return Total(estimate, False, estimated=True, cut=True)
    if estimate <= cap:  # the planner guessed low: all we know is "over the cap"
        return Total(cap + 1, False, cap=cap)
    return Total(estimate, False, estimated=True, cap=cap)


def _capped_count(qs: QuerySet, cap: int = EXACT_TOTAL) -> int | None:
    """The matching runs counted up to `cap` + 1, or None when cancelled at COUNT_BUDGET_MS."""
    # In the list's order, so PostgreSQL plans it as the page: an index scan stopping at the cap.
    capped = qs.order_by("-created_at", "-id").values("pk")[: cap + 1]
    return _in_budget(capped.count, COUNT_BUDGET_MS)


def _in_budget(read: Callable[[], T], ms: int) -> T | None:
    """`read()`, or None when PostgreSQL cancelled it after `ms` (elsewhere it always runs). The
    budget is local to a savepoint and put back, so the view's transaction keeps its timeout."""
    if connection.vendor != "postgresql":
        return read()
    with connection.cursor() as cursor, transaction.atomic():
        cursor.execute("SELECT current_setting('statement_timeout')")
        (previous,) = cursor.fetchone()
        cursor.execute("SELECT set_config('statement_timeout', %s, true)", [f"{ms}ms"])
        try:
            with transaction.atomic():
                return read()
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
    qs: RunQuerySet,
    text: str,
    since: datetime | None = None,
    until: datetime | None = None,
    walk: bool | None = None,
) -> RunQuerySet:
    """Runs whose detail or attempted call contains `text`, case-insensitively. On PostgreSQL a
    rare text starts from the search table's trigram indexes; a common one walks the runs
    (`walk` says which, when the caller has asked `run_search.walks` already)."""
    found = qs.annotate(attempted_text=Cast("attempted", TextField())).filter(
        Q(detail__icontains=text) | Q(attempted_text__icontains=text)
    )
    if not run_search.in_use():
        return found
    if walk is None:
        walk = run_search.walks(text, since, until)
    if walk:
        return found
    return found.filter(run_search.matching_runs(text, since, until))
