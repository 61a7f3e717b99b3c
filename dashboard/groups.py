"""The failure groups page's filters, read from the query string, and its rows.

Every filter lives in the URL; a value the page cannot use is named in `errors` and shown above
an empty list, never silently dropped. The groups themselves are folded and counted by
`insights.groups`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Q, QuerySet
from django.http import QueryDict

from dashboard.filters import canonical_failure_type
from insights.groups import GROUP_WINDOWS
from insights.models import FailureGroup
from orchestrator import keyset

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


@dataclass
class GroupFilter:
    """The groups page's filters from the query string; refused values are named in `errors`."""

    state: str = ""
    failure_type: str = ""
    source: list[str] = field(default_factory=list)
    has: str = ""
    range: str = ""
    q: str = ""
    after: tuple[datetime, int] | None = None
    before: tuple[datetime, int] | None = None
    errors: list[str] = field(default_factory=list)

    @classmethod
    def from_query(cls, params: QueryDict) -> GroupFilter:
        f = cls(q=params.get("q", "").strip()[:200])
        sources = (v.strip() for raw in params.getlist("source") for v in raw.split(","))
        f.source = [v for v in sources if v][:20]
        choices = {
            "state": FailureGroup.State.values,
            "has": list(HAS),
            "range": list(GROUP_WINDOWS),
        }
        f.failure_type = canonical_failure_type(params.get("failure_type", ""), f.errors)
        for name, allowed in choices.items():
            raw = params.get(name, "").strip()
            if raw and raw not in allowed:
                label = name.replace("_", " ")
                f.errors.append(f"{label} {raw!r} is not one of: {', '.join(allowed)}.")
            elif raw:
                setattr(f, name, raw)
        for name in ("after", "before"):
            if params.get(name):
                try:
                    setattr(f, name, keyset.decode_cursor(params[name]))
                except ValueError:
                    f.errors.append("This page link is damaged: start again from the first page.")
        return f

    def apply(self, qs: QuerySet) -> QuerySet:
        if self.state:
            qs = qs.filter(state=self.state)
        if self.failure_type:
            qs = qs.filter(failure_type=self.failure_type)
        if self.source:
            qs = qs.filter(source__in=self.source)
        if self.q:
            qs = qs.filter(Q(pattern__icontains=self.q) | Q(example__icontains=self.q))
        return qs

    @property
    def active(self) -> bool:
        return bool(self.state or self.failure_type or self.source or self.has or self.q)


@dataclass
class GroupRow:
    group: FailureGroup
    window_counts: dict[str, int] = field(default_factory=dict)
    spark: list[int] = field(default_factory=list)
