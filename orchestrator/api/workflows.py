"""Workflows run by the built-in coordinator: start one, read it, read its coverage.

Starting a workflow creates its row and sends its first step after commit
(`coordination.workflow.start_workflow`); everything after that is the coordinator's.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router
from ninja.responses import Status

from orchestrator.api.errors import error_responses, invalid, not_found_error
from orchestrator.api.schemas import CoverageOut, WorkflowIn, WorkflowOut
from orchestrator.coordination import coverage
from orchestrator.coordination.registry import registry
from orchestrator.coordination.workflow import start_workflow
from orchestrator.models import ReviewItem, Run, Workflow

router = Router(tags=["workflows"])


@router.post("", response={201: WorkflowOut, **error_responses(body=True)})
def start(request: HttpRequest, payload: WorkflowIn) -> tuple[int, dict[str, Any]]:
    """Start a workflow run by this product's coordinator over the registered sources."""
    if not registry().sources_for(payload.capability):
        known = ", ".join(sorted(registry().capabilities)) or "none"
        raise invalid(f"No sources are registered for capability {payload.capability!r} ({known}).")
    wf = start_workflow(
        payload.name,
        payload.topics,
        payload.capability,
        breadth=payload.breadth,
        goal=payload.goal,
        input=payload.input,
        token=getattr(request, "auth", None),
    )
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
