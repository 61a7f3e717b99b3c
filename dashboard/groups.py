"""The failure groups page's filters (a form read from the query string) and its rows; the groups
are folded and counted by `insights.groups`."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Q, QuerySet

from dashboard.filterforms import (
    ClippedField,
    CursorField,
    FailureTypeField,
    OneOfField,
    QueryForm,
    ValuesField,
)
from insights.groups import GROUP_WINDOWS
from insights.models import FailureGroup

# What a tile or a filter may ask for: groups with at least one failure of this kind.
HAS = {
    "wasted": ("wasted retries", "wasted"),
    "partial": ("partial results kept", "partial"),
    "futile": ("futile retries", "futile"),
    "retry": ("retried", "decided_retry"),
    "switch": ("switched", "decided_switch"),
    "escalated": ("escalated", "decided_escalate"),
    "recovered": ("recovered", "recovered_retry"),
    "lost": ("lost", "ended_lost"),
}


class GroupFilters(QueryForm):
    """The groups page's filters; the view applies `has` and `range` with a window's counts."""

    state = OneOfField(choices=FailureGroup.State.choices)
    failure_type = FailureTypeField()
    source = ValuesField()
    has = OneOfField(choices=[(name, label) for name, (label, _) in HAS.items()])
    range = OneOfField(choices=[(w.name, w.label) for w in GROUP_WINDOWS.values()])
    q = ClippedField(clip=200)
    after = CursorField()
    before = CursorField()

    def apply(self, qs: QuerySet) -> QuerySet:
        data = self.cleaned_data
        exact = {"state": data["state"], "failure_type": data["failure_type"]}
        qs = qs.filter(**{name: value for name, value in exact.items() if value})
        if data["source"]:
            qs = qs.filter(source__in=data["source"])
        if data["q"]:
            qs = qs.filter(Q(pattern__icontains=data["q"]) | Q(example__icontains=data["q"]))
        return qs

    @property
    def active(self) -> bool:
        names = ("state", "failure_type", "source", "has", "q")
        return any(self.cleaned_data.get(name) for name in names)


@dataclass
class GroupRow:
    group: FailureGroup
    window_counts: dict[str, int] = field(default_factory=dict)
    spark: list[int] = field(default_factory=list)
