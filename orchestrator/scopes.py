"""What a token may read and act on: its own work, and with granted scopes everyone's.

A token's own work is what it reported: the runs it reported, the workflows it started and the
runs reported for them (its subagents' included), and the review items of those runs. Beyond that,
`read:all` reads every run, workflow and review item of the token's project, and `act:all` acts
on them: decisions,
escalations, retries (`retry_of`), reports into a workflow (`workflow`), finishing a run or a
workflow, acknowledgements. What a token may not read answers as an unknown id does (404 in the
error envelope), never a 403 that would confirm it exists; what it may read and not act on is
refused the same way, so an action never tells more than a read. No scope crosses projects:
another project's work is unknown to a token whatever its scopes. Routing policies and
classification are nobody's work: every token reads them (with its project's overrides).

Every check of the API goes through this module (the MCP tools call the API's operations, so
they are checked here too); a condition every check needs is added here once.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from functools import reduce
from typing import Any

from django.db.models import Q, QuerySet

from orchestrator.models import ApiToken, ReviewItem, Run, Workflow
from orchestrator.models.tokens import ACT_ALL, READ_ALL, project_of


def reads_all(token: ApiToken) -> bool:
    return token.has_scope(READ_ALL)


def acts_all(token: ApiToken) -> bool:
    return token.has_scope(ACT_ALL)


def _own_ways(token: ApiToken, model: type) -> list[Q]:
    """The conditions on `model`'s rows any of which makes a row `token`'s own work."""
    if model is Workflow:
        return [Q(token_id=token.pk)]
    # A run or review item: reported by the token, or of a workflow the token started.
    started = Workflow.objects.filter(token_id=token.pk).values("pk")
    return [Q(token_id=token.pk), Q(workflow_id__in=started)]


def _own(token: ApiToken, model: type) -> Q:
    """The condition on `model`'s rows that are `token`'s own work."""
    return reduce(operator.or_, _own_ways(token, model))


def visible(token: ApiToken, qs: QuerySet) -> QuerySet:
    """The rows of `qs` (runs, workflows or review items) `token` may read: never beyond its
    project, whatever its scopes."""
    qs = qs.filter(project_id=token.project_id)
    if reads_all(token):
        return qs
    return qs.filter(_own(token, qs.model))


def visible_parts(token: ApiToken, qs: QuerySet) -> list[QuerySet]:
    """`visible(token, qs)` as querysets whose union it is (they may overlap: a run the token
    reported into a workflow it started is in two), one per way a row is the token's own.

    For lists in keyset pages: each part is a condition PostgreSQL reads in order from one index
    (the token's runs from `run_token_created`, its workflows' runs through
    `run_workflow_created`), where their OR made it walk every run of the project newest first
    and discard the other tokens' (docs/run-indexes.md). Merge the parts' pages with
    `keyset.merged`."""
    qs = qs.filter(project_id=token.project_id)
    if reads_all(token):
        return [qs]
    return [qs.filter(way) for way in _own_ways(token, qs.model)]


def owners(obj: Run | Workflow | ReviewItem) -> set[int]:
    """The ids of the tokens whose own work `obj` is (none for the built-in coordinator's own)."""
    ids = {obj.token_id}
    if not isinstance(obj, Workflow) and obj.workflow_id is not None:
        ids.add(obj.workflow.token_id)  # callers load the workflow with the row (select_related)
    return ids - {None}


def owns(token: ApiToken, obj: Run | Workflow | ReviewItem) -> bool:
    return token.pk in owners(obj)


def same_project(token: ApiToken, obj: Run | Workflow | ReviewItem) -> bool:
    """Whether `obj` is of `token`'s project: no scope reaches into another project."""
    return obj.project_id == token.project_id


def may_read(token: ApiToken, obj: Run | Workflow | ReviewItem) -> bool:
    return same_project(token, obj) and (reads_all(token) or owns(token, obj))


def may_act(token: ApiToken, obj: Run | Workflow | ReviewItem) -> bool:
    return same_project(token, obj) and (acts_all(token) or owns(token, obj))


def readable(token: ApiToken, model: type, pk: Any, *related: str) -> Any:
    """The row `pk` of `model` if `token` may read it, else None (as for an unknown id)."""
    obj = _load(model, pk, related)
    return obj if obj is not None and may_read(token, obj) else None


def actionable(token: ApiToken, model: type, pk: Any, *related: str) -> Any:
    """The row `pk` of `model` if `token` may act on it, else None (as for an unknown id)."""
    obj = _load(model, pk, related)
    return obj if obj is not None and may_act(token, obj) else None


def _load(model: type, pk: Any, related: tuple[str, ...]) -> Any:
    if model is not Workflow:
        related = tuple(dict.fromkeys(("workflow", *related)))  # `owners` reads its token
    qs = model.objects.filter(pk=pk)
    return (qs.select_related(*related) if related else qs).first()


class Reporters:
    """The tokens of reports, which carry only their token's id: loaded once, when a report
    names a workflow or run that is not its token's own."""

    def __init__(self, token_ids: Iterable[int]) -> None:
        self.ids = set(token_ids)
        self.tokens: dict[int, ApiToken] | None = None

    def may_act(self, token_id: int, obj: Run | Workflow | ReviewItem) -> bool:
        if obj.project_id != project_of(token_id):  # another project's: never
            return False
        if token_id in owners(obj):  # its own: no need to load the token
            return True
        if self.tokens is None:
            self.tokens = ApiToken.objects.in_bulk(self.ids)
        token = self.tokens.get(token_id)
        return token is not None and may_act(token, obj)
