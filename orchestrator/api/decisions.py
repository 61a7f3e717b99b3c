"""Routing as a service and classification as a service, for coordinators in any language.

`POST /decisions` asks the same `budget.decide` (the policy, the source's budget, breaker and
Retry-After hold) as the built-in coordinator and its local recovery; `POST /classify` reads an
error described as data (or an MCP tool result) with the classifier and the enabled provider
overrides. The rules live in `orchestrator.coordination` and `classifier`; this module maps HTTP
onto them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest
from django.urls import reverse
from ninja import Router

from classifier.described import classify_description, describe_mcp_result
from classifier.taxonomy import UnknownFailureType, parse_failure_type
from orchestrator import ingest, scopes
from orchestrator.api.bodies import EnvelopeParser
from orchestrator.api.errors import (
    ApiError,
    FieldError,
    error_responses,
    invalid,
    not_found_error,
)
from orchestrator.coordination import budget, clock, efficacy, policy, routing
from orchestrator.coordination.registry import registry
from orchestrator.coordination.workflow import decide_reported
from orchestrator.models import ApiToken, ReviewItem, Run, Workflow
from orchestrator.schemas import (
    ClassificationOut,
    ClassifyIn,
    DecisionIn,
    DecisionOut,
)
from orchestrator.vocabulary import Action, FailureCategory

router = Router(tags=["coordination"])

# A path on this server made a whole address, as `HttpRequest.build_absolute_uri` makes it.
Absolute = Callable[[str], str]

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
    "result_type",
}


@router.post("/decisions", response={200: DecisionOut, **error_responses(404, 409, body=True)})
def decide(request: HttpRequest, payload: DecisionIn) -> dict[str, Any]:
    """Routing as a service: what to do after a failure, with the current policy version.

    With `run` (a failed run an agent reported) the decision is the built-in coordinator's own,
    stored on the run as it stores its own (action, delay, reason, policy version, budget spent):
    the run page shows it and the tiles count it; asked again, the stored decision is returned
    without deciding or spending budget twice. An `escalate` then carries `review`: the item it
    opened. A policy's switch_and_escalate answers `switch_source` with `escalate: true`: switch
    now, and (with `run`) `review` names the item asking a person to repair the failing source,
    which nobody waits for. `retryable: false` in the failure is never answered with a blind
    retry; `wait` says the source holds every caller back (its Retry-After, an open breaker)
    for `delay_seconds`, whichever query failed; `switch_to` names the source a `switch_source`
    goes to (the capability's next untried source, else an alternative the failure suggested
    that names a registered source). Without `run`, an agent may name its own alternatives
    (`alternatives`, registered here or not; else the failure's bare source names): they come
    back in `alternatives` ranked by switch efficacy, as the built-in coordinator orders its
    own, and the best untried one is `switch_to`.

    `refresh: true` (on a `retry`) says: refresh your credentials, then retry once at once. An
    auth failure gets it when the policy refreshes credentials first and either the source has a
    refresher registered here or the agent can refresh its own: it says so with
    `can_refresh: true`, or its failure suggests it (`alternatives_suggested: ["refresh
    credentials"]`). The same task's auth failure at a later attempt (or, with `run`, right after
    the refreshed one) is escalated as the policy says.

    A decision on another token's run takes `act:all`; naming another token's `workflow`,
    `read:all` (else 404, as for an unknown id)."""
    return decision(request.auth, payload, request.build_absolute_uri)


def decision(token: ApiToken, payload: DecisionIn, absolute: Absolute) -> dict[str, Any]:
    """`POST /decisions` for `token`; `absolute` makes a review item's page address whole."""
    ingest.settle()  # the reports this process has stored have reached their sources' health
    if payload.run is not None:
        return _decide_on_run(token, payload, absolute)
    assert payload.failure is not None and payload.source is not None  # DecisionIn says so
    wf = None
    if payload.workflow:
        wf = scopes.readable(token, Workflow, payload.workflow)
        if wf is None:
            raise not_found_error(f"No workflow with id {payload.workflow}.")
    failure = payload.failure
    tried = {payload.source, *payload.tried}
    if wf is not None and payload.topic:
        tried |= wf.sources_tried(payload.topic)
    capability = wf.capability if wf is not None and wf.capability else None
    ftype = failure.failure_type
    target, suggested = registry().switch_target(
        payload.source,
        tried,
        failure.suggested_sources(),
        capability=capability,
        prefer=lambda untried: efficacy.ranked(payload.source, ftype, untried),
    )
    named = payload.alternatives or failure.suggested_sources()
    own = efficacy.ranked_alternatives(payload.source, ftype, named, tried)
    if own and (target is None or payload.alternatives):  # the agent knows what it can call
        target, suggested = own[0], True
    ctx = routing.Context(
        source=payload.source,
        has_alternative=target is not None,
        switch_to=target,
        suggested=suggested,
        can_refresh=(
            payload.can_refresh
            or registry().has_refresher(payload.source)
            or routing.offers_refresh(failure.alternatives)
        ),
        # An agent refreshes once per task: an auth failure after its first attempt follows one.
        refreshed=failure.failure_type == FailureCategory.AUTH_FAILURE and payload.attempt > 1,
        partial_count=len(failure.partial_results),
        project_id=token.project_id,
    )
    decision = budget.decide(failure.facts(), payload.attempt, ctx, now=clock.now())
    spent = decision.budget_cost if decision.calls_again else 0.0
    return decision.to_dict() | {"budget_spent": spent, "alternatives": own}


def _decide_on_run(token: ApiToken, payload: DecisionIn, absolute: Absolute) -> dict[str, Any]:
    run = scopes.actionable(token, Run, payload.run)
    if run is None:
        raise not_found_error(f"No run with id {payload.run}.")
    if payload.failure is not None and payload.failure.failure_type != run.failure_type:
        error = FieldError(
            "failure.failure_type", f"run {run.pk} failed with {run.failure_type or 'no failure'}"
        )
        raise invalid("The failure is not the run's.", [error])
    item = None
    if not run.decision:
        if run.status != Run.Status.FAILED:
            raise ApiError(
                409,
                FailureCategory.INVALID_INPUT,
                _nothing_to_decide(run),
                alternatives=["report the run's outcome first (PATCH /runs/{id})"],
            )
        _, item = decide_reported(run, payload.can_refresh)
    elif run.decision == Action.ESCALATE:
        item = run.review_items.order_by("-id").first()
    elif run.decision == Action.SWITCH_SOURCE and run.signature:
        # A switch that asked for a repair: the item asking it (perhaps another run's, of the
        # same failure of the same source).
        item = ReviewItem.objects.filter(signature=run.signature, blocking=False).last()
    answer = run.stored_decision() | {"run": run.pk}
    if item is not None:
        answer["review"] = review_ref(item, absolute)
        answer["escalate"] = not item.blocking
    return answer


def _nothing_to_decide(run: Run) -> str:
    if run.is_pending:
        return f"Run {run.pk} is {run.status}: there is no failure to decide about yet."
    return f"Run {run.pk} {run.status}: only a failed run gets a decision."


def review_ref(item: ReviewItem, absolute: Absolute) -> dict[str, Any]:
    """An item as a decision or an escalation names it: its id and its page's address."""
    url = reverse("dashboard:review_item", args=[item.pk])
    return {"id": item.pk, "url": absolute(url)}


@router.post("/classify", response={200: ClassificationOut, **error_responses(body=True)})
def classify(request: HttpRequest, payload: ClassifyIn) -> dict[str, Any]:
    """Classify a raw error described as data, or an MCP tool result with isError true, with the
    enabled provider overrides (those scoped to `provider` too)."""
    return classification(payload, EnvelopeParser.parsed(request))


def classification(payload: ClassifyIn, raw: Any) -> dict[str, Any]:
    """`POST /classify` of `payload`, parsed from the body `raw` (an MCP result is read as sent)."""
    if payload.is_error is not None:
        if payload.is_error is not True:
            raise invalid("An MCP tool result is classified only when isError is true.")
        described = describe_mcp_result(raw)
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
