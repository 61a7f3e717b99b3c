"""The policies endpoints (read-only for agents) and the `X-Policy-Version` header every API
answer carries, so that an agent embedding the classifier notices an operator's edit on any answer
and fetches the policies again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Schema
from pydantic import Field

from orchestrator.analytics import dryrun
from orchestrator.api.errors import FieldError, error_responses, invalid
from orchestrator.api.middleware import api_view
from orchestrator.models import (
    PolicyState,
    PolicyVersion,
    ProjectPolicy,
    ProviderOverride,
    RoutingPolicy,
    ScrubRule,
)
from orchestrator.schemas import (
    DryRunIn,
    DryRunOut,
    PoliciesOut,
    PolicyVersionListOut,
)

logger = logging.getLogger(__name__)

router = Router(tags=["policies"])

VERSION_HEADER = "X-Policy-Version"


class PolicyVersionMiddleware:
    """Every answer of the API's views, errors included, carries the policy version."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not api_view(request) or response.status_code == 503:
            # 503: the database is unavailable; asking it for the version would make the
            # client wait a second connection timeout for an answer that cannot carry one.
            return response
        try:
            response[VERSION_HEADER] = str(PolicyState.announced_version())
        except DatabaseError:  # the database is down: the answer says so; no version to tell
            logger.warning("policy version unavailable for %s", request.path, exc_info=True)
        return response


@router.get("", response={200: PoliciesOut, **error_responses()})
def current_policies(request: HttpRequest) -> dict[str, Any]:
    """The routing policy per failure type (the token's project's own rows where it overrides the
    global ones), the enabled provider overrides and scrub rules, with the version that every
    decision records."""
    return policy_snapshot(request.auth.project_id)


def policy_snapshot(project_id: int) -> dict[str, Any]:
    """`GET /policies` for a token of this project."""
    # Re-read the version after the rows: an edit committed in between would pair new rows
    # with an old version (the version is what decisions record), so read again until stable.
    version = PolicyState.current_version()
    while True:
        snapshot = {
            "version": version,
            "policies": _project_rows(project_id),
            "overrides": [o.snapshot() for o in ProviderOverride.objects.filter(enabled=True)],
            "scrub_rules": [r.snapshot() for r in ScrubRule.objects.filter(enabled=True)],
        }
        latest = PolicyState.current_version()
        if latest == version:
            return snapshot
        version = latest


def _project_rows(project_id: int) -> list[dict[str, Any]]:
    """Every failure type's row as the project's runs are routed: its override, else the global."""
    own = {
        p.failure_type: {k: v for k, v in p.snapshot().items() if k != "project"}
        for p in ProjectPolicy.objects.filter(project_id=project_id).select_related("project")
    }
    rows = [own.pop(p.failure_type, None) or p.snapshot() for p in RoutingPolicy.objects.all()]
    return rows + list(own.values())


class VersionFilters(Schema):
    limit: int = Field(50, ge=1, le=200)
    before: int | None = Field(None, ge=1, description="Versions older than this one")


@router.get("/versions", response={200: PolicyVersionListOut, **error_responses(422)})
def policy_versions(request: HttpRequest, filters: Query[VersionFilters]) -> dict[str, Any]:
    """Every policy version, newest first, with its routing table, overrides and scrub rules, and
    what changed from the version before. Restoring one is an operator's action on the policies
    page."""
    qs = PolicyVersion.objects.newest_first()
    if filters.before is not None:
        qs = qs.filter(version__lt=filters.before)
    rows = list(qs[: filters.limit + 1])
    page = rows[: filters.limit]
    if not page:
        return {"items": [], "next_before": None}
    older = rows[filters.limit] if len(rows) > filters.limit else None
    if older is None:
        older = PolicyVersion.objects.filter(version__lt=page[-1].version).newest_first().first()
    previous = [*page[1:], older]
    items = [version_out(v, before) for v, before in zip(page, previous, strict=True)]
    more = len(rows) > filters.limit
    return {"items": items, "next_before": page[-1].version if more else None}


def version_out(version: PolicyVersion, older: PolicyVersion | None) -> dict[str, Any]:
    return {
        "version": version.version,
        "created_at": version.created_at,
        "actor": version.actor_label,
        "note": version.note,
        "restored_from": version.restored_from,
        "policies": version.policies,
        "overrides": version.overrides,
        "scrub_rules": version.scrub_rules,
        "changes": version.changes_since(older),
    }


@router.post("/dry-run", response={200: DryRunOut, **error_responses(body=True)})
def dry_run(request: HttpRequest, payload: DryRunIn) -> dict[str, Any]:
    """Replay the last `days` of stored failures through routing under the current table with
    `policies` over it, and under the current table alone: retries, waiting time, switches,
    escalations (and per day), aborts, and the wasted calls and recovered runs expected from what
    followed the recorded decisions. Above 100,000 failures a sample is replayed (`sampled`).
    Nothing is saved. The failures are the token's project's, and both tables are that
    project's (its own rows where it overrides the global policy, as `GET /policies` answers)."""
    project_id = request.auth.project_id
    rows = [row.given() for row in payload.policies]
    errors = [e for i, row in enumerate(rows) for e in _row_errors(i, row, project_id)]
    if errors:
        raise invalid("Invalid proposed policy.", errors)
    return dryrun.dry_run(rows, days=payload.days, projects=[project_id])


def _row_errors(index: int, row: dict[str, Any], project_id: int) -> list[FieldError]:
    """The model's own validation of the proposed row over the current one of the project's
    table (ranges, max ≥ base, a hard-fail type tried once, the actions a row may name)."""
    own = ProjectPolicy.objects.filter(
        project_id=project_id, failure_type=row["failure_type"]
    ).first()
    if own is not None:
        base = {k: v for k, v in own.snapshot().items() if k != "project"}
    else:
        current = RoutingPolicy.objects.filter(failure_type=row["failure_type"]).first()
        base = current.snapshot() if current else {}
    candidate = RoutingPolicy(**{**base, **row})
    try:
        candidate.clean_fields(exclude=["failure_type"])
        candidate.clean()
    except ValidationError as exc:
        return [
            FieldError(f"policies.{index}.{name}", " ".join(messages))
            for name, messages in exc.message_dict.items()
        ]
    return []
