"""The top bar's search: runs, review items, workflows and failure groups found by id or by text,
one section per kind, each in keyset pages of its own (newest first).

A kind is searched as a few narrow queries ("branches"), each served by its own index: text by a
trigram index on PostgreSQL (the runs' by their search table), a name the text equals by the
name's index (the names the runs filter suggests, a minute old at most), a failure type by the
type's; failure groups, a few thousand at most, in one query. Each branch reads at most a page and
one row past the
cursor; their keys are merged here and the page's rows read by id. A number is also looked up as
an id of each kind and shown first in its section; it is never a redirect, since numbers are text
too (a 404, a 429). "run 42", "workflow 42", "review 42" or "group 42" names one object and goes
straight to its page.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.db.models import Exists, Model, OuterRef, Q, QuerySet
from django.urls import reverse

from classifier.taxonomy import UnknownFailureType, parse_failure_type
from dashboard.access import may_see, visible
from dashboard.filterforms import ClippedField, CursorField, QueryForm
from dashboard.filters import SEARCH_MAX, known_names
from dashboard.filters import search as run_text
from dashboard.views.common import LIST_DEFER
from insights.models import FailureGroup
from orchestrator import keyset
from orchestrator import search as run_search
from orchestrator.models import ReviewItem, Run, Workflow
from orchestrator.schemas.common import BIGINT_MAX

SECTION_SIZE = 10
RUNS_WINDOW = SEARCH_MAX
# The most runs whose review items a rare text looks for (it was judged rare: a few thousand).
RARE_RUNS = 10_000
# Up to this many, a rare text's runs (read once for the review items) serve the runs section
# too, by id, instead of a second search.
FEW_RUNS = 200
# A bare id ("42", "#42"), and an id with its kind ("run 42", "workflow #42", "group:42").
NUMBER = re.compile(r"#?(\d{1,19})")
NAMED = re.compile(r"(run|review|item|workflow|group)\s*[:#]?\s*#?(\d{1,19})", re.IGNORECASE)
HEX = re.compile(r"[0-9a-f]{6,64}")
DAMAGED = "This “more” link is damaged: start again from the first results."


@dataclass(frozen=True)
class Query:
    """What the typed text can mean: text always; an id, names, a failure type, a hash maybe."""

    text: str
    number: int | None = None
    agents: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    failure_type: str = ""
    hexa: str = ""
    walk: bool | None = None  # whether the runs search walks the window (asked once)
    # Read once per page: a rare text's matching runs in the window, every project's ("runs"),
    # and the most that read asked for ("most").
    read_once: dict[str, Any] = field(default_factory=dict, compare=False)


def read(text: str, now: datetime) -> Query:
    text = text.strip()
    found = NUMBER.fullmatch(text)
    number = int(found.group(1)) if found and 0 < int(found.group(1)) <= BIGINT_MAX else None
    lowered = text.lower()
    try:
        failure_type = parse_failure_type(text).value
    except UnknownFailureType:
        failure_type = ""
    return Query(
        text=text,
        number=number,
        agents=[n for n in known_names("agent") if n.lower() == lowered],
        sources=[n for n in known_names("source") if n.lower() == lowered],
        failure_type=failure_type,
        hexa=lowered if HEX.fullmatch(lowered) else "",
        walk=run_search.in_use() and run_search.walks(text, now - RUNS_WINDOW, None),
    )


class SearchForm(QueryForm):
    """The text, and where each section's page starts (its own cursor)."""

    q = ClippedField(clip=200, label="Search")
    runs = CursorField(error_messages={"invalid": DAMAGED})
    reviews = CursorField(error_messages={"invalid": DAMAGED})
    workflows = CursorField(error_messages={"invalid": DAMAGED})
    groups = CursorField(error_messages={"invalid": DAMAGED})


# Branches: the narrow queries each kind is searched with


def _rare_runs(q: Query, since: datetime, most: int = RARE_RUNS) -> list[tuple[datetime, int]]:
    """A rare text's runs in the window (at most `most`), searched once per query: read again
    only when a larger `most` is asked and the first read was cut at its own."""
    read = q.read_once.get("runs")
    if read is None or (len(read) == q.read_once["most"] and most > len(read)):
        found = run_text(Run.objects.filter(created_at__gte=since), q.text, since, walk=False)
        q.read_once["runs"] = read = list(found.values_list("created_at", "pk")[:most])
        q.read_once["most"] = most
    return read[:most]


def _run_branches(runs: QuerySet, q: Query, now: datetime) -> list[QuerySet]:
    since = now - RUNS_WINDOW
    recent = runs.filter(created_at__gte=since)
    # One past FEW_RUNS tells: the review section reads further only if it is shown and needs it.
    rare = _rare_runs(q, since, FEW_RUNS + 1) if run_search.in_use() and not q.walk else None
    if rare is not None and len(rare) <= FEW_RUNS:
        # By id, within their times (the partitions they are in); `runs` keeps the visibility.
        times = [at for at, _ in rare] or [since]
        found = recent.filter(pk__in=[pk for _, pk in rare], created_at__lte=max(times))
        out = [found.filter(created_at__gte=min(times))]
    else:
        out = [run_text(recent, q.text, since, walk=q.walk)]
    if q.agents:
        out.append(recent.filter(agent__in=q.agents))
    if q.sources:
        out.append(recent.filter(source__in=q.sources))
    if q.failure_type:
        out.append(recent.filter(failure_type=q.failure_type))
    if len(q.hexa) == 32:  # a trace id or a failure's signature, at any time
        out += [runs.filter(trace_id=q.hexa), runs.filter(signature=q.hexa)]
    return out


def _review_branches(items: QuerySet, q: Query, now: datetime) -> list[QuerySet]:
    """The item's own text (its reason carries the run's detail), its facets, and the text of
    its run (what was attempted) among the runs the runs section searches."""
    out = [items.filter(reason__icontains=q.text)]
    if q.agents:
        out.append(items.filter(agent__in=q.agents))
    if q.sources:
        out.append(items.filter(source__in=q.sources))
    if q.failure_type:
        out.append(items.filter(failure_type=q.failure_type))
    if len(q.hexa) == 32:
        out.append(items.filter(signature=q.hexa))
    since = now - RUNS_WINDOW
    runs = Run.objects.filter(created_at__gte=since)
    if not run_search.in_use():
        out.append(items.filter(run_id__in=run_text(runs, q.text).values("pk")))
    elif q.walk:
        # Many runs match: walk the window's items newest first, each one's run looked up.
        matching = run_text(runs, q.text, walk=True).filter(pk=OuterRef("run_id"))
        out.append(items.filter(Exists(matching), created_at__gte=since))
    else:  # few do: their ids, from the search table's trigram indexes
        out.append(items.filter(run_id__in=[pk for _, pk in _rare_runs(q, since)]))
    return out


def _workflow_branches(workflows: QuerySet, q: Query, now: datetime) -> list[QuerySet]:
    return [workflows.filter(name__icontains=q.text), workflows.filter(goal__icontains=q.text)]


def _group_branches(groups: QuerySet, q: Query, now: datetime) -> list[QuerySet]:
    """One query: groups are few (one per signature), read whole or through the trigram indexes."""
    found = Q(pattern__icontains=q.text) | Q(example__icontains=q.text) | Q(source__iexact=q.text)
    if q.failure_type:
        found |= Q(failure_type=q.failure_type)
    if q.hexa:
        found |= Q(signature__startswith=q.hexa)
    return [groups.filter(found)]


@dataclass(frozen=True)
class Kind:
    name: str  # the section's id and its cursor's parameter
    title: str
    model: type[Model]
    field: str  # the keyset's time column, newest first
    branches: Callable[[QuerySet, Query, datetime], list[QuerySet]]
    related: tuple[str, ...] = ()
    defer: tuple[str, ...] = ()
    page_name: str = ""  # the kind's page, for a named id ("run 42")


KINDS = [
    Kind("runs", "Runs", Run, "created_at", _run_branches, ("workflow",), LIST_DEFER, "run_detail"),
    Kind(
        "reviews",
        "Review items",
        ReviewItem,
        "created_at",
        _review_branches,
        ("workflow", "assignee"),
        page_name="review_item",
    ),
    Kind(
        "workflows",
        "Workflows",
        Workflow,
        "created_at",
        _workflow_branches,
        page_name="workflow_detail",
    ),
    Kind(
        "groups",
        "Failure groups",
        FailureGroup,
        "last_seen",
        _group_branches,
        page_name="failure_group",
    ),
]
BY_NAME = {kind.name: kind for kind in KINDS}
NAMED_KINDS = {"run": "runs", "review": "reviews", "item": "reviews", "workflow": "workflows"}
NAMED_KINDS["group"] = "groups"


def named_page(user: Any, text: str) -> str | None:
    """The page of the one object `text` names with its kind and id ("run 42"), if it exists."""
    found = NAMED.fullmatch(text.strip())
    if not found or int(found.group(2)) > BIGINT_MAX:
        return None
    kind = BY_NAME[NAMED_KINDS[found.group(1).lower()]]
    pk = int(found.group(2))
    if not visible(user, kind.model).filter(pk=pk).exists():
        return None
    return reverse(f"dashboard:{kind.page_name}", args=[pk])


# Sections


@dataclass
class Section:
    kind: Kind
    rows: list[Any]
    exact: Any = None  # the object whose id is the text (first page only)
    next: str | None = None
    paged: bool = False  # past the first page
    more_href: str = ""
    first_href: str = ""

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def empty(self) -> bool:
        return self.exact is None and not self.rows


def section(
    kind: Kind, user: Any, q: Query, now: datetime, after: tuple[datetime, int] | None
) -> Section:
    """One page of `kind`'s matches after the cursor `after`, newest first."""
    base = visible(user, kind.model)
    exact = None
    if q.number is not None and after is None:
        exact = _rows(kind, base.filter(pk=q.number), [q.number])
        exact = exact[0] if exact else None
    keys: set[tuple[datetime, int]] = set()
    for branch in kind.branches(base, q, now):
        if after is not None:
            branch = keyset.beyond(branch, after, kind.field, descending=True)
        newest = branch.order_by(f"-{kind.field}", "-pk").values_list(kind.field, "pk")
        keys.update(newest[: SECTION_SIZE + 1])
    skip = q.number if exact is not None else None
    ordered = sorted((key for key in keys if key[1] != skip), reverse=True)
    shown = ordered[:SECTION_SIZE]
    rows = _rows(kind, base, [pk for _, pk in shown], shown)
    more = len(ordered) > SECTION_SIZE
    cursor = keyset.encode_cursor(shown[-1]) if more and shown else None
    return Section(kind, rows, exact, cursor, after is not None)


def _rows(
    kind: Kind, qs: QuerySet, ids: list[int], keys: list[tuple[datetime, int]] | None = None
) -> list[Any]:
    """The rows of `ids`, in that order."""
    if not ids:
        return []
    qs = qs.filter(pk__in=ids).select_related(*kind.related).defer(*kind.defer)
    if keys:  # the runs' partitions: only those the page's times fall in
        qs = qs.filter(**{f"{kind.field}__gte": keys[-1][0], f"{kind.field}__lte": keys[0][0]})
    found = {row.pk: row for row in qs}
    return [found[pk] for pk in ids if pk in found]


def sections(
    user: Any, q: Query, now: datetime, cursors: dict[str, Any], only: str = ""
) -> list[Section]:
    """A section per kind this user may see (or only the kind `only`)."""
    out = []
    for kind in KINDS:
        if only and kind.name != only:
            continue
        if may_see(user, kind.model):
            out.append(section(kind, user, q, now, cursors.get(kind.name)))
    return out


def runs_list_url(q: Query) -> str:
    """The runs page searching the same text over the same window."""
    return reverse("dashboard:runs") + "?" + urlencode({"q": q.text, "range": "7d"})
