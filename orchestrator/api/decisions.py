"""Routing as a service and classification as a service, for coordinators in any language.

`POST /decisions` runs the same `routing.decide` with the same policy snapshot and retry budget as
the built-in coordinator; `POST /classify` reads an error described as data (or an MCP tool
result) with the classifier and the enabled provider overrides. The rules live in
`orchestrator.coordination` and `classifier`; this module maps HTTP onto them.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Body, Router

from classifier.described import classify_description
from orchestrator.api.errors import error_responses, invalid, not_found_error
from orchestrator.api.schemas import ClassificationOut, DecisionIn, DecisionOut
from orchestrator.coordination import budget, clock, policy, routing
from orchestrator.coordination.registry import registry
from orchestrator.models import Workflow
from orchestrator.vocabulary import Action

router = Router(tags=["coordination"])


@router.post("/decisions", response={200: DecisionOut, **error_responses()})
def decide(request: HttpRequest, payload: DecisionIn) -> dict[str, Any]:
    """Routing as a service: what to do after a failure, with the current policy version."""
    wf = None
    if payload.workflow:
        wf = Workflow.objects.filter(pk=payload.workflow).first()
        if wf is None:
            raise not_found_error(f"No workflow with id {payload.workflow}.")
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
    now = clock.now()
    decision = routing.decide(failure, payload.attempt, snap, state, ctx, now=now)
    if decision.action == Action.RETRY and not budget.try_spend(
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


@router.post("/classify", response={200: ClassificationOut, **error_responses()})
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
