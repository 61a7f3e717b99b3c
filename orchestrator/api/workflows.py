"""Workflows run by the built-in coordinator: start one, read it, read its coverage.

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

from orchestrator.api.errors import EnvelopeParser, error_responses, invalid, not_found_error
from orchestrator.api.ingest import key_reused, request_hash
from orchestrator.api.runs import REPLAYED_HEADER
from orchestrator.api.schemas import CoverageOut, Str255, WorkflowIn, WorkflowOut
from orchestrator.coordination import coverage
from orchestrator.coordination.registry import registry
from orchestrator.coordination.workflow import start_workflow_once
from orchestrator.models import ReviewItem, Run, Workflow

router = Router(tags=["workflows"])


@router.post("", response={201: WorkflowOut, **error_responses(409, body=True)})
def start(
    request: HttpRequest,
    response: HttpResponse,
    payload: WorkflowIn,
    idempotency_key: Annotated[Str255 | None, Header(alias="Idempotency-Key")] = None,
) -> Status:
    """Start a workflow run by this product's coordinator over the registered sources. With an
    `Idempotency-Key` header, repeating the request returns the stored workflow (201 again, with
    `Idempotent-Replayed: true`) and never starts a second one; the same key with another body is
    a 409."""
    if not registry().sources_for(payload.capability):
        known = ", ".join(sorted(registry().capabilities)) or "none"
        raise invalid(f"No sources are registered for capability {payload.capability!r} ({known}).")
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
    )
    if wf.request_hash != digest:
        raise key_reused(idempotency_key or "", wf.pk, "Idempotency-Key", noun="workflow")
    if replayed:
        response[REPLAYED_HEADER] = "true"
    return Status(201, _workflow_out(wf))


@router.get("/{int:workflow_id}", response={200: WorkflowOut, **error_responses(404)})
def get_workflow(request: HttpRequest, workflow_id: int) -> dict[str, Any]:
    return _workflow_out(_workflow(workflow_id))


@router.get("/{int:workflow_id}/coverage", response={200: CoverageOut, **error_responses(404)})
def get_coverage(request: HttpRequest, workflow_id: int) -> dict[str, Any]:
    """The stored coverage of a finished workflow, or the coverage so far of a running one."""
    wf = _workflow(workflow_id)
    final = wf.is_finished and bool(wf.coverage)
    cov = wf.coverage if final else coverage.workflow_coverage(wf)
    return {
        "workflow": wf.pk,
        "status": wf.status,
        "final": final,
        "summary": wf.coverage_summary,
        "coverage": cov,
    }


def _workflow(workflow_id: int) -> Workflow:
    wf = Workflow.objects.filter(pk=workflow_id).first()
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
