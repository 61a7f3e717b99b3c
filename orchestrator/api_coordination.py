"""Coordination endpoints: routing as a service, classification of described errors, workflows.

Mounted on the v1 API (`api.add_router("", coordination_router)`), so bearer auth, throttling,
the JSON parser and the error envelope come from `orchestrator.api`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from django.http import HttpRequest
from ninja import Body, Router, Schema
from ninja.responses import Status
from pydantic import Field, StringConstraints

from classifier.described import classify_description
from orchestrator import budget, coordinator, policy, routing
from orchestrator.apierrors import error_responses, invalid, not_found_error
from orchestrator.models import ReviewItem, Run, Workflow
from orchestrator.sources import registry

coordination_router = Router(tags=["coordination"])

Name = Annotated[str, StringConstraints(min_length=1, max_length=100)]
Topic = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class DecisionIn(Schema):
    failure: dict[str, Any] = Field(description="An envelope or the output of /classify")
    attempt: int = Field(1, ge=1, le=1000, description="The attempt that just failed")
    source: Name
    workflow: int | None = Field(None, ge=1)


class DecisionOut(Schema):
    action: str
    delay_seconds: float
    reason: str
    policy_version: int


class ClassificationOut(Schema):
    failure_type: str
    category: str
    retryable: bool
    retry_after: float | None
    status_code: int | None
    provider_code: str | None
    exception_type: str
    signal: str
    chain: list[str]
    detail: str
    taxonomy_version: int


class WorkflowIn(Schema):
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    goal: Annotated[str, StringConstraints(max_length=2000)] = ""
    topics: list[Topic] = Field(min_length=1, max_length=100)
    capability: Name
    breadth: int = Field(1, ge=1, le=10)
    input: dict[str, Any] = Field(default_factory=dict, description="Passed to the sources")


class WorkflowOut(Schema):
    id: int
    name: str
    status: str
    topics: list[str]
    capability: str
    breadth: int
    coverage_summary: str
    created_at: datetime
    finished_at: datetime | None
    runs: dict[str, int]
    open_reviews: int


class CoverageOut(Schema):
    workflow: int
    status: str
    final: bool
    summary: str
    coverage: dict[str, Any]


@coordination_router.post("/decisions", response={200: DecisionOut, **error_responses()})
def decide(request: HttpRequest, payload: DecisionIn) -> dict[str, Any]:
    """Routing as a service: what to do after a failure, with the current policy version."""
    wf = _workflow(payload.workflow) if payload.workflow else None
    failure = payload.failure
    partial = failure.get("partial_results")
    ctx = routing.Context(
        source=payload.source,
        has_alternative=_has_alternative(payload.source, wf),
        can_refresh=registry().has_refresher(payload.source),
        partial_count=len(partial) if isinstance(partial, list) else 0,
    )
    snap = policy.current_snapshot()
    state = budget.state(payload.source)
    now = coordinator.clock.now()
    decision = routing.decide(failure, payload.attempt, snap, state, ctx, now=now)
    if decision.action == routing.RETRY and not budget.try_spend(
        payload.source, decision.budget_cost
    ):
        empty = routing.Budget(source=payload.source, tokens=0)
        decision = routing.decide(failure, payload.attempt, snap, empty, ctx, now=now)
    return decision.to_dict()


def _has_alternative(source: str, wf: Workflow | None) -> bool:
    reg = registry()
    if wf is not None and wf.capability:
        return any(s != source for s in reg.sources_for(wf.capability))
    return any(source in names and len(names) > 1 for names in reg.capabilities.values())


@coordination_router.post("/classify", response={200: ClassificationOut, **error_responses()})
def classify(request: HttpRequest, payload: Body[dict[str, Any]]) -> dict[str, Any]:
    """Classify a raw error described as data, or an MCP tool result with isError true."""
    if "isError" in payload:
        if payload.get("isError") is not True:
            raise invalid("An MCP tool result is classified only when isError is true.")
        payload = describe_mcp_result(payload)
    failure = classify_description(payload, classifier=policy.current_classifier())
    data = failure.to_dict()
    return data | {"failure_type": data["category"]}


def describe_mcp_result(result: dict[str, Any]) -> dict[str, Any]:
    """Map an MCP tool result (isError: true) onto a described error the classifier reads."""
    texts = [
        c.get("text", "")
        for c in result.get("content") or []
        if isinstance(c, dict) and c.get("type") == "text"
    ]
    sc = result.get("structuredContent")
    sc = sc if isinstance(sc, dict) else {}
    err = sc.get("error") if isinstance(sc.get("error"), dict) else sc
    code = err.get("code", err.get("status"))
    described: dict[str, Any] = {"exception_type": "mcp.ToolError", "message": " ".join(texts)}
    if isinstance(code, int) and not isinstance(code, bool):
        described["status_code"] = code
    elif isinstance(code, str) and code:
        described["provider_code"] = code
    if isinstance(err.get("retryable"), bool):
        described["retryable"] = err["retryable"]
    delay = err.get("retry_after", err.get("retryAfter", err.get("retry_after_seconds")))
    if isinstance(delay, int | float | str) and not isinstance(delay, bool):
        described["headers"] = {"Retry-After": str(delay)}
    if isinstance(err.get("message"), str) and not texts:
        described["message"] = err["message"]
    return described


@coordination_router.post("/workflows", response={201: WorkflowOut, **error_responses()})
def start_workflow(request: HttpRequest, payload: WorkflowIn) -> tuple[int, dict[str, Any]]:
    """Start a workflow run by this product's coordinator over the registered sources."""
    if not registry().sources_for(payload.capability):
        known = ", ".join(sorted(registry().capabilities)) or "none"
        raise invalid(f"No sources are registered for capability {payload.capability!r} ({known}).")
    wf = coordinator.start_workflow(
        payload.name,
        payload.topics,
        payload.capability,
        breadth=payload.breadth,
        goal=payload.goal,
        input=payload.input,
        token=getattr(request, "auth", None),
    )
    return Status(201, _workflow_out(wf))


@coordination_router.get(
    "/workflows/{int:workflow_id}", response={200: WorkflowOut, **error_responses(404)}
)
def get_workflow(request: HttpRequest, workflow_id: int) -> dict[str, Any]:
    return _workflow_out(_workflow(workflow_id))


@coordination_router.get(
    "/workflows/{int:workflow_id}/coverage", response={200: CoverageOut, **error_responses(404)}
)
def workflow_coverage(request: HttpRequest, workflow_id: int) -> dict[str, Any]:
    """The stored coverage of a finished workflow, or the coverage so far of a running one."""
    wf = _workflow(workflow_id)
    final = wf.is_finished and bool(wf.coverage)
    cov = wf.coverage if final else coordinator.workflow_coverage(wf)
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
