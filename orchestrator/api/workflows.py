"""Workflows: start one (run by the built-in coordinator, or by an agent's own), read it, read its
coverage, and finish an agent's own.

Starting a workflow creates its row with its first step's outbox message in one transaction
(`coordination.workflow.start_workflow`), so a broker that is down delays the start and never
turns the accepted request into an error; an `Idempotency-Key` makes a retried start return the
stored workflow. Everything after that is the coordinator's.
"""

from __future__ import annotations

from typing import Annotated, Any

from django.http import HttpRequest, HttpResponse
from ninja import Header, Router
from ninja.responses import Status

from orchestrator import scopes
from orchestrator.api.bodies import EnvelopeParser
from orchestrator.api.errors import (
    ApiError,
    error_responses,
    invalid,
    not_found_error,
)
from orchestrator.api.runs import REPLAYED_HEADER
from orchestrator.coordination import coverage
from orchestrator.coordination.registry import registry
from orchestrator.coordination.workflow import RunsInFlight, finish_external, start_workflow_once
from orchestrator.ingest.pipeline import key_reused, request_hash
from orchestrator.models import ReviewItem, Run, Workflow
from orchestrator.schemas import CoverageOut, Str255, WorkflowIn, WorkflowOut
from orchestrator.vocabulary import Coordinator, FailureCategory

router = Router(tags=["workflows"])


@router.post("", response={201: WorkflowOut, **error_responses(409, body=True)})
def start(
    request: HttpRequest,
    response: HttpResponse,
    payload: WorkflowIn,
    idempotency_key: Annotated[Str255 | None, Header(alias="Idempotency-Key")] = None,
) -> Status:
    """Start a workflow: run by this product's coordinator over the registered sources of
    `capability`, or with `"coordinator": "external"` by your own (no sources needed: your agents
    report its runs with its id and a `topic`, and `POST /workflows/{id}/finish` settles it).
    With an `Idempotency-Key` header, repeating the request returns the stored workflow (201
    again, with `Idempotent-Replayed: true`) and never starts a second one; the same key with
    another body is a 409."""
    external = payload.coordinator == Coordinator.EXTERNAL
    if not external and not registry().sources_for(payload.capability):
        known = ", ".join(sorted(registry().capabilities)) or "none"
        error = invalid(
            f"No sources are registered for capability {payload.capability!r} ({known})."
        )
        error.alternatives.append('your own coordinator: "coordinator": "external"')
        raise error
    digest = request_hash(EnvelopeParser.parsed(request) or {}) if idempotency_key else ""
    wf, replayed = start_workflow_once(
        payload.name,
        payload.topics,
        payload.capability,
        breadth=payload.breadth,
        goal=payload.goal,
        input=payload.input,
        token=getattr(request, "auth", None),
        idempotency_key=idempotency_key or "",
        request_hash=digest,
        coordinator=payload.coordinator,
    )
    if wf.request_hash != digest:
        raise key_reused(idempotency_key or "", wf.pk, "Idempotency-Key", noun="workflow")
    if replayed:
        response[REPLAYED_HEADER] = "true"
    return Status(201, _workflow_out(wf))


@router.get("/{int:workflow_id}", response={200: WorkflowOut, **error_responses(404)})
def get_workflow(request: HttpRequest, workflow_id: int) -> dict[str, Any]:
    """One workflow this token started or, with `read:all`, any (else 404)."""
    return _workflow_out(_workflow(request, workflow_id))


@router.get("/{int:workflow_id}/coverage", response={200: CoverageOut, **error_responses(404)})
def get_coverage(request: HttpRequest, workflow_id: int) -> dict[str, Any]:
    """The stored coverage of a finished workflow, or the coverage so far of a running one
    (another token's takes `read:all`, else 404)."""
    wf = _workflow(request, workflow_id)
    final = wf.is_finished and bool(wf.coverage)
    cov = wf.coverage if final else coverage.workflow_coverage(wf)
    return {
        "workflow": wf.pk,
        "status": wf.status,
        "final": final,
        "summary": wf.coverage_summary,
        "coverage": cov,
    }


@router.post("/{int:workflow_id}/finish", response={200: WorkflowOut, **error_responses(404, 409)})
def finish(request: HttpRequest, workflow_id: int) -> dict[str, Any]:
    """Settle an external workflow from the runs reported for it, by the built-in synthesis
    rules: per topic the coverage verdict, a topic with no successful run a gap with its reason.
    While a review item of it is open the workflow stays open (`awaiting_review`): finish it
    again once your coordinator has acted on the resolution. A run still running is a 409;
    finishing a finished workflow returns it. Another token's workflow takes `act:all` (else
    404)."""
    wf = _workflow(request, workflow_id, act=True)
    if wf.is_built_in:
        raise ApiError(
            409,
            FailureCategory.INVALID_INPUT,
            f"Workflow {workflow_id} is stepped by the built-in coordinator, which settles it.",
        )
    try:
        wf = finish_external(workflow_id) or wf
    except RunsInFlight as exc:
        raise ApiError(
            409,
            FailureCategory.INVALID_INPUT,
            f"Workflow {workflow_id} has runs still running: {', '.join(map(str, exc.run_ids))}.",
            alternatives=["finish them first (PATCH /runs/{id}), then finish the workflow"],
        ) from None
    return _workflow_out(wf)


def _workflow(request: HttpRequest, workflow_id: int, act: bool = False) -> Workflow:
    """The workflow if the token may read it (with `act`, act on it); else 404 as for none."""
    find = scopes.actionable if act else scopes.readable
    wf = find(request.auth, Workflow, workflow_id)
    if wf is None:
        raise not_found_error(f"No workflow with id {workflow_id}.")
    return wf


def _workflow_out(wf: Workflow) -> dict[str, Any]:
    counts = dict.fromkeys(Run.Status.values, 0)
    for status in wf.runs.values_list("status", flat=True):
        counts[status] += 1
    return {
        "id": wf.pk,
        "name": wf.name,
        "status": wf.status,
        "coordinator": wf.coordinator,
        "topics": wf.topics,
        "capability": wf.capability,
        "breadth": wf.breadth,
        "coverage_summary": wf.coverage_summary,
        "created_at": wf.created_at,
        "finished_at": wf.finished_at,
        "runs": counts,
        "open_reviews": ReviewItem.objects.filter(
            workflow=wf, state__in=ReviewItem.PENDING
        ).count(),
    }
