"""The review queue's filters (a form read from the query string), facet counts and grouped view.

Every filter lives in the URL (a filtered queue is a link to share, the back button works). The
facets are columns of the review item itself (copied from the run when it opens), so counting
thousands of open items is one GROUP BY GROUPING SETS over the pending rows (`facet_counts`),
never a join with the run table; each facet is counted with every *other* active filter
applied, as a faceted search shows them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.db import connection
from django.db.models import (
    BooleanField,
    Case,
    CharField,
    Count,
    ExpressionWrapper,
    Func,
    IntegerField,
    Min,
    Q,
    QuerySet,
    Value,
    When,
    Window,
)
from django.http import QueryDict

from dashboard.filterforms import (
    ClippedField,
    CursorField,
    FailureTypeField,
    IdField,
    OneOfField,
    QueryForm,
)
from orchestrator import keyset
from orchestrator.models import FailureType, ReviewItem, Workflow
from orchestrator.vocabulary import Origin

PAGE_SIZE = 50
# What a queue row leaves unread: its workflow's name is all it shows of the workflow.
ROW_DEFER = (
    "edited_input",
    "note",
    "outcome",
    *(f"workflow__{name}" for name in ("goal", "input", "coverage", "topics", "coverage_summary")),
)
GROUPS_SHOWN = 50
WORKFLOWS_SHOWN = 8
# How long an item has waited: the buckets of the age facet, youngest first.
AGES = {
    "1h": ("under an hour", timedelta(0), timedelta(hours=1)),
    "24h": ("1 to 24 hours", timedelta(hours=1), timedelta(hours=24)),
    "older": ("over a day", timedelta(hours=24), None),
}
CLAIMS = {"unclaimed": "unclaimed", "mine": "claimed by me", "others": "claimed by others"}
# The facets counted by the one GROUP BY, in the order the page shows them.
FACETS = ("claim", "origin", "failure_type", "source", "agent", "age")
FACET_TITLES = {
    "claim": "Claim",
    "origin": "Reported by",
    "failure_type": "Failure type",
    "source": "Source",
    "agent": "Agent",
    "age": "Waiting",
    "workflow": "Workflow",
}
STATES = {"open": "Open", "resolved": "Resolved"}
# Resolved items only: the overview's "not picked up" tile opens this list.
PICKUPS = {"overdue": "not picked up (agent gone?)"}
# The open list shows the items work waits on first; the repairs asked while the work went on
# on another source follow on the last page of those, then in pages of their own (this part).
PARTS = {"repairs": "repairs (the work went on)"}
VIEWS = {"list": "One by one", "groups": "Grouped by signature"}


@dataclass
class FacetOption:
    value: str
    label: str
    count: int
    selected: bool
    href: str


class QueueFilters(QueryForm):
    """The queue's filters; each facet's counts apply every one of them but its own."""

    failure_type = FailureTypeField()
    source = ClippedField(clip=100)
    agent = ClippedField(clip=100)
    workflow = IdField(what="a workflow id")
    age = OneOfField(choices=[(name, label) for name, (label, _, _) in AGES.items()])
    claim = OneOfField(choices=CLAIMS.items())
    origin = OneOfField(choices=Origin.choices)
    signature = ClippedField(clip=64)
    state = OneOfField(choices=STATES.items(), empty_value="open")
    pickup = OneOfField(choices=PICKUPS.items())
    view = OneOfField(choices=VIEWS.items(), empty_value="list")
    part = OneOfField(choices=PARTS.items())
    after = CursorField()
    before = CursorField()

    def clean_state(self) -> str:
        if self.data.get("show") == "resolved" and not self.data.get("state"):
            return "resolved"  # the old "Resolved" link
        if self.data.get("pickup") and not self.data.get("state"):
            return "resolved"
        return self.cleaned_data["state"]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("pickup") and data.get("state") == "open":
            self.add_error("pickup", "Only resolutions are picked up: use it with state=resolved.")
        return data

    def conditions(self, user: Any, now: datetime) -> dict[str, Q]:
        """Each active filter's condition, by its name (a facet's, or "signature")."""
        data = self.cleaned_data
        exact = ("failure_type", "source", "agent", "origin", "signature")
        out = {name: Q(**{name: data[name]}) for name in exact if data[name]}
        if data["workflow"] is not None:
            out["workflow"] = Q(workflow_id=data["workflow"])
        if data["age"]:
            out["age"] = _age_condition(data["age"], now)
        if data["claim"]:
            out["claim"] = _claim_condition(data["claim"], user)
        if data["pickup"]:
            out["pickup"] = ReviewItem.pickup_overdue_condition(now)
        return out

    def apply(self, qs: QuerySet, user: Any, now: datetime, skip: str = "") -> QuerySet:
        """Apply every filter except the facet `skip` (a facet's own counts ignore its value)."""
        for name, condition in self.conditions(user, now).items():
            if name != skip:
                qs = qs.filter(condition)
        return qs

    @property
    def active(self) -> bool:
        data = self.cleaned_data
        facets = ("failure_type", "source", "agent", "age", "claim", "origin", "signature")
        return data.get("workflow") is not None or any(data.get(n) for n in (*facets, "pickup"))

    def value(self, facet: str) -> str:
        value = self.cleaned_data[facet]
        return "" if value is None else str(value)


def _age_condition(age: str, now: datetime) -> Q:
    _, youngest, oldest = AGES[age]
    condition = Q(created_at__lte=now - youngest)
    if oldest is not None:
        condition &= Q(created_at__gt=now - oldest)
    return condition


def _claim_condition(claim: str, user: Any) -> Q:
    if claim == "unclaimed":
        return Q(state=ReviewItem.State.OPEN)
    mine = Q(state=ReviewItem.State.CLAIMED, assignee_id=user.pk)
    if claim == "mine":
        return mine
    return Q(state=ReviewItem.State.CLAIMED) & ~Q(assignee_id=user.pk)


def _age_bucket(now: datetime) -> Case:
    whens = [
        When(created_at__gt=now - oldest, then=Value(name))
        for name, (_, _, oldest) in AGES.items()
        if oldest is not None
    ]
    return Case(*whens, default=Value("older"), output_field=CharField())


def _claim_bucket(user: Any) -> Case:
    return Case(
        When(state=ReviewItem.State.OPEN, then=Value("unclaimed")),
        When(assignee_id=user.pk, then=Value("mine")),
        default=Value("others"),
        output_field=CharField(),
    )


# ---------------------------------------------------------------------------------------------
# Facet counts


def facets(
    pending: QuerySet, f: QueueFilters, user: Any, now: datetime, params: QueryDict
) -> tuple[list[tuple[str, str, list[FacetOption]]], int]:
    """Each facet's options with their counts (`facet_counts`), most common first (the chosen
    one always shown), and the open items in all (unfiltered)."""
    counts, total = facet_counts(pending, f, user, now)
    out = []
    for name in FACETS:
        options = _options(name, counts[name], f.value(name), params)
        out.append((name, FACET_TITLES[name], options))
    workflows = _workflow_options(pending, f, user, now, params)
    out.append(("workflow", FACET_TITLES["workflow"], workflows))
    return out, total


def chosen_count(facets: list[tuple[str, str, list[FacetOption]]]) -> int | None:
    """The open items every filter matches, when a facet of `facet_counts` is chosen: its
    chosen option was counted with every other filter (None: no such facet is chosen)."""
    for name, _, options in facets:
        if name in FACETS:
            for option in options:
                if option.selected:
                    return option.count
    return None


def facet_counts(
    pending: QuerySet, f: QueueFilters, user: Any, now: datetime
) -> tuple[dict[str, dict[str, int]], int]:
    """{facet: {value: open items}}, each facet counted with every other active filter, and
    the pending items in all.

    On PostgreSQL one statement: a GROUP BY GROUPING SETS with a set per facet (and an empty
    one, the total) over the pending items, each active filter a boolean column and each facet's
    count a `count(*) FILTER` of the others, so the items are read once instead of once per
    facet and once more for the total. Elsewhere (SQLite) a GROUP BY per facet.
    """
    annotated = pending.annotate(claim=_claim_bucket(user), age=_age_bucket(now))
    if connection.vendor != "postgresql":
        counts = {
            name: dict(
                f.apply(annotated, user, now, skip=name)
                .values_list(name)
                .annotate(n=Count("id"))
                .order_by()
            )
            for name in FACETS
        }
        return counts, pending.count()
    conditions = f.conditions(user, now)
    flags = {
        f"is_{name}": ExpressionWrapper(condition, output_field=BooleanField())
        for name, condition in conditions.items()
    }
    # No ORDER BY inside: the groups do not need the queue's order, and sorting 5,000 rows
    # was a quarter of the statement.
    inner, params = (
        annotated.annotate(**flags).values(*FACETS, *flags).order_by().query.sql_with_params()
    )
    quote = connection.ops.quote_name
    counts = []
    for name in FACETS:
        others = [quote(flag) for flag in flags if flag != f"is_{name}"]
        counts.append(f"count(*) FILTER (WHERE {' AND '.join(others)})" if others else "count(*)")
    columns = ", ".join(quote(name) for name in FACETS)
    sets = ", ".join(f"({quote(name)})" for name in FACETS)
    grouped = ", ".join(f"GROUPING({quote(name)})" for name in FACETS)
    sql = (
        f"SELECT {columns}, {grouped}, {', '.join(counts)}, count(*) FROM ({inner}) AS pending "
        f"GROUP BY GROUPING SETS ({sets}, ())"
    )
    out: dict[str, dict[str, int]] = {name: {} for name in FACETS}
    total = 0
    width = len(FACETS)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        for row in cursor.fetchall():
            values, grouping, numbers = row[:width], row[width : 2 * width], row[2 * width :]
            if 0 not in grouping:  # the empty grouping set: every pending item
                total = numbers[-1]
                continue
            facet = grouping.index(0)  # the one column this row groups by
            if numbers[facet]:
                out[FACETS[facet]][values[facet]] = numbers[facet]
    return out, total


def _options(
    name: str, counts: dict[str, int], chosen: str, params: QueryDict
) -> list[FacetOption]:
    if chosen and chosen not in counts:
        counts = {**counts, chosen: 0}
    ordered = _ordered(name, counts)
    kept = _kept(params, name)
    return [
        FacetOption(
            value, _label(name, value), n, value == chosen, _toggle(kept, name, value, chosen)
        )
        for value, n in ordered
    ]


def _ordered(name: str, counts: dict[str, int]) -> list[tuple[str, int]]:
    fixed = {"age": list(AGES), "claim": list(CLAIMS), "origin": [o.value for o in Origin]}
    if name in fixed:
        return [(value, counts.get(value, 0)) for value in fixed[name]]
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _label(name: str, value: str) -> str:
    if name == "age":
        return AGES[value][0]
    if name == "claim":
        return CLAIMS[value]
    if name == "origin":
        return Origin(value).label
    if name == "failure_type":
        return FailureType(value).label if value in FailureType.values else value
    return value or "—"


def _kept(params: QueryDict, name: str) -> list[tuple[str, str]]:
    """The query's parameters that a click on facet `name` keeps: all but its own and the
    page's position (a new filter starts at the first page)."""
    dropped = (name, "after", "before")
    return [(k, v) for k, values in params.lists() if k not in dropped for v in values]


def _toggle(kept: list[tuple[str, str]], name: str, value: str, chosen: str) -> str:
    """The query string that picks `value` for facet `name` (or drops it when already chosen)."""
    pairs = [*kept, (name, value)] if value != chosen else kept
    return "?" + urlencode(pairs)


def _workflow_options(
    pending: QuerySet, f: QueueFilters, user: Any, now: datetime, params: QueryDict
) -> list[FacetOption]:
    rows = list(
        f.apply(pending, user, now, skip="workflow")
        .filter(workflow__isnull=False)
        .values_list("workflow_id")
        .annotate(n=Count("id"))
        .order_by("-n", "workflow_id")[:WORKFLOWS_SHOWN]
    )
    chosen = f.value("workflow")
    counts = {str(pk): n for pk, n in rows}
    if chosen and chosen not in counts:
        counts[chosen] = 0
    names = dict(Workflow.objects.filter(pk__in=[int(k) for k in counts]).values_list("pk", "name"))
    kept = _kept(params, "workflow")
    return [
        FacetOption(
            value,
            f"{names.get(int(value), '?')} #{value}",
            n,
            value == chosen,
            _toggle(kept, "workflow", value, chosen),
        )
        for value, n in counts.items()
    ]


# ---------------------------------------------------------------------------------------------
# Pages and groups


def list_page(qs: QuerySet, f: QueueFilters) -> keyset.Page:
    """Open items oldest first (the longest wait at the top), or resolved ones latest first."""
    cursors = {name: f.cleaned_data[name] for name in ("after", "before")}
    if f.cleaned_data["state"] == "resolved":
        return keyset.page(qs, PAGE_SIZE, **cursors, field="resolved_at", descending=True)
    return keyset.page(qs, PAGE_SIZE, **cursors, descending=False)


def blocked_first(qs: QuerySet, f: QueueFilters) -> tuple[keyset.Page, str | None]:
    """The open list: the items work waits on, oldest first, in keyset pages; their last page
    goes on with the oldest repairs (items nothing waits on). Return the page and the cursor of
    the repairs' next page (None: no more). With `part=repairs`, a page of repairs alone."""
    repairs = qs.filter(blocking=False)
    if f.cleaned_data["part"] == "repairs":
        return list_page(repairs, f), None
    page = list_page(qs.filter(blocking=True), f)
    room = PAGE_SIZE - len(page.rows)
    if page.next is not None or room <= 0:
        return page, None
    more = keyset.page(repairs, room, descending=False)
    return keyset.Page(page.rows + more.rows, page.previous, None), more.next


@dataclass
class SignatureGroup:
    """Open items sharing a signature: how many this operator may resolve, and the oldest one."""

    signature: str
    count: int
    oldest: datetime
    failure_type: str
    source: str
    held_by_others: int
    item: ReviewItem | None = None
    failure_group: int | None = None


class _CountRows(Func):
    """`count(*)` as a window function: with OVER () on a grouped query, the number of groups."""

    template = "count(*)"
    window_compatible = True
    output_field = IntegerField()


def signature_groups(filtered: QuerySet, user: Any) -> tuple[list[SignatureGroup], int]:
    """The largest groups among the filtered open items, and how many groups there are.

    Items held by another operator are counted apart: "resolve all like this" leaves them to
    whoever claimed them (`ReviewItem.resolve`). The group is judged on its oldest item that
    this operator may resolve.
    """
    signed = filtered.exclude(signature="")
    mine = ReviewItem.resolvable(user)
    rows = list(
        signed.values("signature", "failure_type", "source")
        .annotate(
            count=Count("id", filter=mine),
            oldest=Min("created_at"),
            total=Count("id"),
            first=Min("id", filter=mine),
            groups=Window(_CountRows()),  # every group, before the LIMIT: no second statement
        )
        .order_by("-count", "oldest")[:GROUPS_SHOWN]
    )
    total_groups = rows[0]["groups"] if rows else 0
    groups, firsts = [], {}
    for row in rows:
        group = SignatureGroup(
            row["signature"],
            row["count"],
            row["oldest"],
            row["failure_type"] or "",
            row["source"],
            row["total"] - row["count"],
        )
        groups.append(group)
        if row["first"]:
            firsts[row["first"]] = group
    # The page shows each group's reason and links its item; the rest loads when opened.
    items = ReviewItem.objects.filter(pk__in=firsts).only("id", "reason")
    for item in items:
        firsts[item.pk].item = item
    return groups, total_groups
