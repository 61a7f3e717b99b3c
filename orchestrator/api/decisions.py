"""Routing as a service and classification as a service, for coordinators in any language.

`POST /decisions` runs the same `routing.decide` with the same policy snapshot and retry budget as
the built-in coordinator; `POST /classify` reads an error described as data (or an MCP tool
result) with the classifier and the enabled provider overrides. The rules live in
`orchestrator.coordination` and `classifier`; this module maps HTTP onto them.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router

from classifier.described import classify_description, describe_mcp_result
from classifier.taxonomy import UnknownFailureType, parse_failure_type
from orchestrator.api.errors import (
    EnvelopeParser,
    FieldError,
    error_responses,
    invalid,
    not_found_error,
)
from orchestrator.api.schemas import (
    ClassificationOut,
    ClassifyIn,
    DecisionIn,
    DecisionOut,
)
from orchestrator.coordination import budget, clock, policy, routing
from orchestrator.coordination.registry import registry
from orchestrator.models import Workflow
from orchestrator.vocabulary import Action

router = Router(tags=["coordination"])

# The keys of ClassifyIn that are not part of a described error.
MCP_FIELDS = {
    "provider",
    "is_error",
    "content",
    "structured_content",
    "meta",
    "error_category",
    "is_retryable",
    "code",
}


@router.post("/decisions", response={200: DecisionOut, **error_responses(404, body=True)})
def decide(request: HttpRequest, payload: DecisionIn) -> dict[str, Any]:
    """Routing as a service: what to do after a failure, with the current policy version.

    `retryable: false` in the failure is never answered with a blind retry; `switch_to` names the
    source a `switch_source` goes to (the capability's next untried source, else an alternative
    the failure suggested that names a registered source)."""
    wf = None
    if payload.workflow:
        wf = Workflow.objects.filter(pk=payload.workflow).first()
        if wf is None:
            raise not_found_error(f"No workflow with id {payload.workflow}.")
    failure = payload.failure
    tried = {payload.source, *payload.tried}
    if wf is not None and payload.topic:
        tried |= wf.sources_tried(payload.topic)
    capability = wf.capability if wf is not None and wf.capability else None
    target, suggested = registry().switch_target(
        payload.source, tried, failure.suggested_sources(), capability=capability
    )
    ctx = routing.Context(
        source=payload.source,
        has_alternative=target is not None,
        switch_to=target,
        suggested=suggested,
        can_refresh=registry().has_refresher(payload.source),
        partial_count=len(failure.partial_results),
    )
    facts = failure.facts()
    snap = policy.current_snapshot()
    state = budget.state(payload.source)
    now = clock.now()
    decision = routing.decide(facts, payload.attempt, snap, state, ctx, now=now)
    if decision.action == Action.RETRY and not budget.try_spend(
        payload.source, decision.budget_cost
    ):
        empty = routing.Budget(source=payload.source, tokens=0)
        decision = routing.decide(facts, payload.attempt, snap, empty, ctx, now=now)
    return decision.to_dict()


@router.post("/classify", response={200: ClassificationOut, **error_responses(body=True)})
def classify(request: HttpRequest, payload: ClassifyIn) -> dict[str, Any]:
    """Classify a raw error described as data, or an MCP tool result with isError true, with the
    enabled provider overrides (those scoped to `provider` too)."""
    if payload.is_error is not None:
        if payload.is_error is not True:
            raise invalid("An MCP tool result is classified only when isError is true.")
        described = describe_mcp_result(EnvelopeParser.parsed(request))
        _check_mcp_category(described)
    else:
        described = payload.model_dump(exclude_none=True, exclude=MCP_FIELDS)
    classifier = policy.current_classifier()
    failure = classify_description(described, classifier=classifier, provider=payload.provider)
    data = failure.to_dict()
    return data | {"failure_type": data["category"]}


def _check_mcp_category(described: dict[str, Any]) -> None:
    """Refuse an errorCategory nested in the MCP result that no vocabulary knows (422)."""
    stated = described.get("failure_type")
    if stated is None:
        return
    try:
        parse_failure_type(stated)
    except UnknownFailureType as exc:
        raise invalid("Invalid request.", [FieldError("errorCategory", str(exc))]) from None
