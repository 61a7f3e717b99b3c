"""A workflow as a state machine persisted in its rows: the coordinator step.

Every step is idempotent (a run's decision, its slot and a review item's `continued_at` are the
guards), and the workflow row is locked for the step's duration so two steps never interleave.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from orchestrator.coordination import budget, clock, coverage, dispatch, efficacy, policy, routing
from orchestrator.coordination.escalation import ask_for_repair, escalate
from orchestrator.coordination.registry import registry
from orchestrator.models import (
    DEFAULT_PROJECT_ID,
    ReviewItem,
    Run,
    Workflow,
)
from orchestrator.vocabulary import Action, Coordinator, FailureCategory


def start_workflow(
    name: str,
    topics: list[str],
    capability: str,
    *,
    breadth: int = 1,
    goal: str = "",
    input: dict[str, Any] | None = None,
    token: Any = None,
    idempotency_key: str = "",
    request_hash: str = "",
) -> Workflow:
    """Create a workflow with its first step's message, in one transaction."""
    return start_workflow_once(
        name,
        topics,
        capability,
        breadth=breadth,
        goal=goal,
        input=input,
        token=token,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
    )[0]


def start_workflow_once(
    name: str,
    topics: list[str],
    capability: str,
    *,
    breadth: int = 1,
    goal: str = "",
    input: dict[str, Any] | None = None,
    token: Any = None,
    idempotency_key: str = "",
    request_hash: str = "",
    coordinator: str = Coordinator.BUILT_IN,
) -> tuple[Workflow, bool]:
    """Create a workflow with its first step's message; return it and whether it existed.

    The unique constraint on (token, idempotency key) arbitrates concurrent starts.
    """
    fields = dict(
        name=name,
        goal=goal,
        topics=list(dict.fromkeys(topics)),
        capability=capability,
        breadth=max(1, breadth),
        input=input or {},
        token=token,
        # A token's workflows are its project's; an operator's or the demo's, the default one's.
        project_id=token.project_id if token is not None else DEFAULT_PROJECT_ID,
        idempotency_key=idempotency_key,
        request_hash=request_hash,
        coordinator=coordinator,
        created_at=clock.now(),
    )
    try:
        with transaction.atomic():
            wf = Workflow.objects.create(**fields)
            if wf.is_built_in:
                dispatch.step(wf.pk)
    except IntegrityError:
        if not idempotency_key:
            raise
        return Workflow.objects.get(token=token, idempotency_key=idempotency_key), True
    return wf, False


def step(workflow_id: int, review_item_id: int | None = None) -> str:
    """Advance one workflow as far as its runs allow; return its status afterwards."""
    with transaction.atomic():
        wf = Workflow.objects.select_for_update().filter(pk=workflow_id).first()
        if wf is None:
            return "missing"
        if not wf.is_built_in:
            return wf.status
        # Every resolution not applied yet: a lost step is made good by the sweeper's next nudge.
        pending = set(wf.review_items.unapplied().values_list("pk", flat=True))
        if review_item_id:
            pending.add(review_item_id)
        for item_id in sorted(pending):
            _apply_resolution(wf, item_id)
        if wf.is_finished:
            return wf.status
        if not wf.runs.exists():
            _fan_out(wf)
        for run in wf.runs.filter(status=Run.Status.FAILED, decision="").order_by("pk"):
            _route(wf, run)
        _settle(wf)
        dispatch.dispatch_due(workflow_id=wf.pk)
        return wf.status


def _fan_out(wf: Workflow) -> None:
    sources = repaired_first(registry().sources_for(wf.capability))
    for topic in wf.topics:
        for source in sources[: wf.breadth]:
            first_attempt(wf, topic, source)


def repaired_first(sources: list[str]) -> list[str]:
    """`sources` in their order, those waiting for a repair (switch and escalate) last: new work
    and switches go elsewhere first, and to them only when nothing else is left."""
    disabled = budget.disabled_sources() if sources else set()
    return [s for s in sources if s not in disabled] + [s for s in sources if s in disabled]


def _query(wf: Workflow, topic: str) -> dict[str, Any]:
    return {"operation": wf.capability, "query": f"{wf.goal or wf.name}: {topic}", "topic": topic}


def first_attempt(
    wf: Workflow,
    topic: str,
    source: str,
    attempted: dict | None = None,
    switched_from: Run | None = None,
) -> None:
    """Create the first attempt of a (topic, source) slot; a second create is a no-op."""
    now = clock.now()
    run = Run(
        switched_from=switched_from,
        workflow=wf,
        project_id=wf.project_id,
        topic=topic,
        capability=wf.capability,
        agent=f"{wf.capability}-agent",
        source=source,
        operation=wf.capability,
        attempted=(attempted or _query(wf, topic)) | {"source": source},
        status=Run.Status.QUEUED,
        due_at=now,
        created_at=now,
        slot=f"{wf.pk}:{topic}:{source}",
    )
    _create_once(run)


def _create_once(run: Run) -> bool:
    """Insert `run` unless one of its unique claims (slot, retry attempt) is taken.

    On PostgreSQL the claims live in another table, which ON CONFLICT cannot name."""
    try:
        with transaction.atomic():
            run.save(force_insert=True)
    except IntegrityError:
        return False
    return True


def retry(run: Run, delay: float, attempted: dict | None = None) -> Run | None:
    """Create the next attempt of `run`'s task, due after `delay`; None if it already existed."""
    attempts = Run.objects.attempts_of(run)
    before = attempts.count()
    now = clock.now()
    base = max(now, run.finished_at or now)  # a Retry-After counts from the failure, never earlier
    last = attempts.order_by("-attempt").values_list("attempt", flat=True).first()
    nxt = Run(
        workflow_id=run.workflow_id,
        project_id=run.project_id,
        topic=run.topic,
        capability=run.capability,
        agent=run.agent,
        source=run.source,
        operation=run.operation,
        attempted=attempted if attempted is not None else run.attempted,
        attempt=max(last or run.attempt, run.attempt) + 1,
        retry_of_id=run.root_id,
        status=Run.Status.QUEUED,
        due_at=base + timedelta(seconds=delay),
        created_at=now,
    )
    _create_once(nxt)
    if attempts.count() == before:
        return None
    return Run.objects.filter(retry_of_id=nxt.retry_of_id, attempt=nxt.attempt).first()


def switch(wf: Workflow, run: Run, target: str | None = None) -> Run | None:
    """Start the task on `target`, else where `switch_target` says; None if none is left."""
    nxt = target or _switch_target(wf, run)[0]
    if nxt is None:
        return None
    attempted = {k: v for k, v in run.attempted.items() if k != "source"}
    first_attempt(wf, run.topic, nxt, attempted or None, switched_from=run)
    return wf.runs.filter(slot=f"{wf.pk}:{run.topic}:{nxt}").first()


def _switch_target(wf: Workflow, run: Run) -> tuple[str | None, bool]:
    suggestions = [a for a in run.alternatives if isinstance(a, str)]
    return registry().switch_target(
        run.source,
        wf.sources_tried(run.topic),
        suggestions,
        capability=run.capability or wf.capability or None,
        prefer=lambda untried: repaired_first(
            efficacy.ranked(run.source, run.failure_type, untried)
        ),
    )


def route_context(wf: Workflow | None, run: Run, agent_refreshes: bool = False) -> routing.Context:
    """The facts routing reads about `run`; `agent_refreshes`: its agent said it can refresh its
    credentials (as the run's own alternatives may say), beside a refresher registered here."""
    reg = registry()
    target, suggested = _switch_target(wf, run) if wf is not None else (None, False)
    auth = FailureCategory.AUTH_FAILURE
    refreshed = run.failure_type == auth and run.previous_failure_type() == auth
    return routing.Context(
        source=run.source,
        has_alternative=target is not None,
        switch_to=target,
        suggested=suggested,
        can_refresh=(
            agent_refreshes
            or reg.has_refresher(run.source)
            or (run.is_reported and routing.offers_refresh(run.alternatives))
        ),
        refreshed=refreshed,
        partial_count=run.partial_count,
        poisoned=run.deliveries > settings.RUN_MAX_DELIVERIES,
        project_id=run.project_id,
        agent=run.agent,  # its daily spend budget applies too
    )


def decide_for(wf: Workflow | None, run: Run, agent_refreshes: bool = False) -> routing.Decision:
    """Decide about a failed run with the current policy, paying the retry budget if it retries."""
    facts = {"failure_type": run.failure_type, "retry_after": run.retry_after}
    facts |= {"status_code": run.status_code, "retryable": run.retryable}
    if run.retryable is False:
        facts["retryable_by"] = retryable_by(run)
    context = route_context(wf, run, agent_refreshes)
    return budget.decide(facts, run.attempt, context, now=clock.now())


def retryable_by(run: Run) -> str:
    """Who said whether a retry of `run` can help, for the reason sentence."""
    if run.token_id is not None:
        return "the agent"
    names = (
        [run.exception_type, run.exception_type.rpartition(".")[2]] if run.exception_type else []
    )
    rule = policy.current_classifier().overrides.find(
        run.source,
        codes=[run.provider_code] if run.provider_code else [],
        type_names=names,
        status=run.status_code,
    )
    return (
        "a provider override" if rule is not None and rule.retryable is not None else "the provider"
    )


def record(run: Run, decision: routing.Decision) -> bool:
    """Store `decision` on the run, once."""
    return run.record_decision(
        decision.action,
        decision.reason,
        decision.policy_version,
        delay=decision.delay_seconds,
        budget_spent=decision.budget_cost if decision.calls_again else 0.0,
        switch_to=decision.switch_to,
        refresh=decision.refresh,
        now=clock.now(),
    )


class _Decided(Exception):
    """Another request recorded the run's decision first: undo what this one spent."""


def decide_reported(run: Run, agent_refreshes: bool = False) -> tuple[bool, ReviewItem | None]:
    """Decide about an agent's failed run and store it once; return whether this call decided
    and the review item an escalation opened (`agent_refreshes`: as `route_context` reads it).

    One transaction: a concurrent loser of the conditional update rolls back its budget spend.
    """
    try:
        with transaction.atomic():
            decision = decide_for(run.workflow, run, agent_refreshes)
            if not record(run, decision):
                raise _Decided
            item = None
            if decision.action == Action.ESCALATE:
                item = escalate(run, decision.reason, decision.failure_type)
            elif decision.escalate:
                item = ask_for_repair(run, decision.reason, decision.failure_type)
            return True, item
    except _Decided:
        run.refresh_from_db()
        return False, run.review_items.order_by("-id").first()


def _route(wf: Workflow, run: Run) -> None:
    decision = decide_for(wf, run)
    if not record(run, decision):
        return
    if decision.calls_again:
        retry(run, decision.delay_seconds)
    elif decision.action == Action.SWITCH_SOURCE:
        switch(wf, run, decision.switch_to)
        if decision.escalate:
            ask_for_repair(run, decision.reason, decision.failure_type)
    elif decision.action == Action.ESCALATE:
        escalate(run, decision.reason, decision.failure_type)


def _apply_resolution(wf: Workflow, item_id: int) -> None:
    """Apply a resolved item's decision exactly once, and write what it did on the item."""
    if not ReviewItem.objects.mark_continued(item_id, clock.now()):
        return
    item = ReviewItem.objects.select_related("run").get(pk=item_id)
    if not item.blocking:
        outcome = _apply_repair(wf, item)
    elif wf.is_finished:
        outcome = f"The workflow had already finished ({wf.get_status_display()}): nothing ran."
    else:
        outcome = _apply(wf, item)
    ReviewItem.objects.filter(pk=item_id).update(outcome=outcome[:300])


def _apply(wf: Workflow, item: ReviewItem) -> str:
    run, res = item.run, item.resolution
    if res in (ReviewItem.Resolution.RETRY, ReviewItem.Resolution.RETRY_EDITED):
        edited = res == ReviewItem.Resolution.RETRY_EDITED
        attempted = run.attempted | (item.edited_input or {}) if edited else None
        nxt = retry(run, 0, attempted=attempted)
        if nxt is None:
            return "A next attempt of this task already existed: nothing new was queued."
        how = " with the edited input" if edited else ""
        return f"Retried{how}: run #{nxt.pk} (attempt {nxt.attempt}) on {run.source}."
    if res == ReviewItem.Resolution.SWITCH_SOURCE:
        nxt = switch(wf, run)
        if nxt is None:
            return (
                f"No untried source of {wf.capability} was left for {run.topic!r}: "
                "nothing was switched, the topic keeps what it has."
            )
        return f"Switched from {run.source} to {nxt.source}: run #{nxt.pk}."
    if res == ReviewItem.Resolution.ACCEPT_PARTIAL:
        return f"Stopped; {run.partial_count} partial results kept for {run.topic!r}."
    return f"Stopped this task for good ({run.source}, {run.topic!r})."


def _apply_repair(wf: Workflow, item: ReviewItem) -> str:
    """A repair item's resolution applies to what comes next (the work went on elsewhere): the
    source is re-enabled by the resolving action; a retry also asks the source again for this
    task, whose answer the workflow, reopened, takes in."""
    run, res = item.run, item.resolution
    source = run.source
    if res == ReviewItem.Resolution.RETRY:
        nxt = retry(run, 0)
        if nxt is None:
            return f"{source} re-enabled; a next attempt of this task already existed."
        reopen(wf.pk)
        wf.refresh_from_db()
        return f"{source} re-enabled and asked again: run #{nxt.pk} (attempt {nxt.attempt})."
    if res == ReviewItem.Resolution.REENABLE_SOURCE:
        return f"{source} re-enabled: new work may start on it again."
    if res == ReviewItem.Resolution.DISMISS:
        return f"Dismissed: {source} stays switched away from until it is re-enabled."
    return f"Nothing to apply: the work went on without {source}."


def _settle(wf: Workflow) -> None:
    runs = list(wf.runs.all())
    undecided = any(r.status == Run.Status.FAILED and not r.decision for r in runs)
    blocking = wf.review_items.blocking().exists()
    if undecided or any(r.is_pending for r in runs):
        if wf.status == Workflow.Status.AWAITING_REVIEW and not blocking:
            wf.move_to(Workflow.Status.RUNNING)
        return
    if blocking:
        if wf.status != Workflow.Status.AWAITING_REVIEW:
            wf.move_to(Workflow.Status.AWAITING_REVIEW)
        return
    cov = coverage.workflow_coverage(wf, runs)
    wf.move_to(
        coverage.final_status(cov, runs),
        coverage=cov,
        coverage_summary=coverage.summarise(cov),
        finished_at=clock.now(),
    )


class RunsInFlight(Exception):
    """An agent finished a workflow while some of its runs are still running."""

    def __init__(self, run_ids: list[int]) -> None:
        super().__init__(f"runs still in flight: {run_ids}")
        self.run_ids = run_ids


def finish_external(workflow_id: int) -> Workflow | None:
    """Settle an agent's workflow from the runs it reported, by the built-in synthesis rules.

    An open review item keeps it awaiting review; a run still in flight raises `RunsInFlight`.
    """
    with transaction.atomic():
        wf = Workflow.objects.select_for_update().filter(pk=workflow_id).first()
        if wf is None or wf.is_finished or wf.is_built_in:
            return wf
        runs = list(wf.runs.all())
        running = [r.pk for r in runs if r.is_pending]
        if running:
            raise RunsInFlight(running)
        if wf.review_items.filter(state__in=ReviewItem.PENDING, blocking=True).exists():
            wf.move_to(Workflow.Status.AWAITING_REVIEW)
            return wf
        cov = coverage.workflow_coverage(wf, runs)
        wf.move_to(
            coverage.final_status(cov, runs),
            coverage=cov,
            coverage_summary=coverage.summarise(cov),
            finished_at=clock.now(),
        )
        return wf


def reopen(workflow_id: int | None) -> None:
    """A retried run can change a settled workflow's coverage: let the coordinator settle again."""
    if workflow_id:
        Workflow.objects.filter(
            pk=workflow_id, status__in=(Workflow.Status.SUCCEEDED, Workflow.Status.DEGRADED)
        ).update(status=Workflow.Status.RUNNING, finished_at=None)
