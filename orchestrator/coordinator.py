"""The coordinator: a workflow as a state machine persisted in its rows.

A step (the `coordinate` task, taking a workflow id) fans out one first attempt per topic and
source, routes every failed run that has no decision yet, applies a resolved review item once, and
settles the workflow with its coverage when every topic is done. Every step is idempotent: the
decision written on a run, the run slots and the review item's `continued_at` are the guards, and
the workflow row is locked for the step's duration so two steps never interleave.

Time comes from `clock` and Celery from `dispatcher`, so the recovery benchmark drives the same code
synchronously with a simulated clock.
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce

from orchestrator import budget, coverage, policy, routing
from orchestrator.models import AuditEntry, ReviewItem, Run, Workflow
from orchestrator.sources import Clock, SystemClock, call_with_recovery, registry

# A task started this many times without finishing kills its worker: park it for a human.
MAX_DELIVERIES = 3
# A claimed run whose task never started in this long lost its message (broker hiccup).
LOST_DISPATCH_AFTER = timedelta(minutes=10)
# A running workflow untouched this long gets a step, in case a step message was lost.
NUDGE_AFTER = timedelta(minutes=5)
PENDING_RUN = (Run.Status.QUEUED, Run.Status.RUNNING)


class Dispatcher(Protocol):
    def run(self, run_id: int) -> None: ...

    def step(self, workflow_id: int, review_item_id: int | None = None) -> None: ...


class CeleryDispatcher:
    """Sends the tasks; callers make sure this happens after their transaction commits."""

    def run(self, run_id: int) -> None:
        from orchestrator.tasks import run_subagent

        run_subagent.delay(run_id)

    def step(self, workflow_id: int, review_item_id: int | None = None) -> None:
        from orchestrator.tasks import coordinate

        coordinate.delay(workflow_id, review_item_id)


clock: Clock = SystemClock()
dispatcher: Dispatcher = CeleryDispatcher()


def after_commit_step(workflow_id: int | None, review_item_id: int | None = None) -> None:
    if workflow_id:
        transaction.on_commit(lambda: dispatcher.step(workflow_id, review_item_id))


def after_commit_dispatch(workflow_id: int | None = None) -> None:
    transaction.on_commit(lambda: dispatch_due(workflow_id=workflow_id))


# ---------------------------------------------------------------------------------------------
# Starting a workflow


def start_workflow(
    name: str,
    topics: list[str],
    capability: str,
    *,
    breadth: int = 1,
    goal: str = "",
    input: dict[str, Any] | None = None,
    token: Any = None,
) -> Workflow:
    """Create a workflow and enqueue its first step after commit."""
    with transaction.atomic():
        wf = Workflow.objects.create(
            name=name,
            goal=goal,
            topics=list(dict.fromkeys(topics)),
            capability=capability,
            breadth=max(1, breadth),
            input=input or {},
            token=token,
            created_at=clock.now(),
        )
        after_commit_step(wf.pk)
    return wf


def abort_workflow(workflow_id: int, actor: Any, note: str = "") -> bool:
    """An operator stops a workflow: pending runs are cancelled and the workflow fails."""
    with transaction.atomic():
        wf = Workflow.objects.select_for_update().filter(pk=workflow_id).first()
        if wf is None or wf.is_finished:
            return False
        before = {"status": wf.status}
        wf.runs.filter(status__in=PENDING_RUN).update(
            status=Run.Status.CANCELLED, finished_at=clock.now()
        )
        summary = f"Aborted by {_label(actor)}" + (f": {note}" if note else "")
        wf.move_to(Workflow.Status.FAILED, finished_at=clock.now(), coverage_summary=summary)
        AuditEntry.record(
            actor=actor, action="workflow.abort", obj=wf, before=before, after={"status": "failed"}
        )
    return True


# ---------------------------------------------------------------------------------------------
# Dispatching runs


def dispatch_due(
    now: datetime | None = None, workflow_id: int | None = None, limit: int = 200
) -> int:
    """Claim due queued runs (queued → running, one winner each) and enqueue them; return count."""
    now = now or clock.now()
    due = Run.objects.due(now).filter(workflow__isnull=False).exclude(workflow__capability="")
    if workflow_id:
        due = due.filter(workflow_id=workflow_id)
    sent = 0
    for pk in due.order_by("due_at").values_list("pk", flat=True)[:limit]:
        claimed = Run.objects.filter(pk=pk, status=Run.Status.QUEUED, due_at__lte=now).update(
            status=Run.Status.RUNNING, dispatched_at=now
        )
        if claimed:
            dispatcher.run(pk)
            sent += 1
    return sent


def sweep(now: datetime | None = None) -> int:
    """The beat's safety nets: due retries, lost enqueues and stalled workflows."""
    now = now or clock.now()
    sent = dispatch_due(now)
    lost = Run.objects.filter(
        status=Run.Status.RUNNING,
        started_at__isnull=True,
        dispatched_at__lt=now - LOST_DISPATCH_AFTER,
    )
    for pk in lost.values_list("pk", flat=True)[:100]:
        if Run.objects.filter(pk=pk, started_at__isnull=True).update(dispatched_at=now):
            dispatcher.run(pk)
            sent += 1
    stalled = Workflow.objects.filter(
        status__in=(Workflow.Status.RUNNING, Workflow.Status.AWAITING_REVIEW),
        updated_at__lt=now - NUDGE_AFTER,
    )
    for pk in stalled.values_list("pk", flat=True)[:100]:
        dispatcher.step(pk)
    return sent


# ---------------------------------------------------------------------------------------------
# Executing one run (the subagent task's body)


def execute_run(run_id: int, *, run_clock: Clock | None = None) -> str:
    """Run a claimed run once; a redelivery of a finished run does nothing. Return what happened."""
    run_clock = run_clock or clock
    run = Run.objects.filter(pk=run_id).select_related("workflow").first()
    if run is None or run.status != Run.Status.RUNNING:
        return "skipped"
    now = run_clock.now()
    wait = budget.admit(run.source, now)
    if wait is not None:
        # The provider asked us to wait, or its breaker is open: back to the queue, no call.
        run.transition(Run.Status.RUNNING, Run.Status.QUEUED, due_at=wait)
        return "deferred"
    if not _start(run, now):
        return "skipped"
    if run.deliveries > MAX_DELIVERIES:
        _park(run, run_clock.now())
        return "parked"
    envelope, calls = _call_source(run, run_clock)
    finished = run_clock.now()
    if run.record_outcome(envelope, finished, calls):
        _record_health(run.source, envelope, finished)
    after_commit_step(run.workflow_id)
    return run.status


def _start(run: Run, now: datetime) -> bool:
    started = Run.objects.filter(pk=run.pk, status=Run.Status.RUNNING).update(
        deliveries=F("deliveries") + 1, started_at=Coalesce(F("started_at"), now)
    )
    run.refresh_from_db(fields=["deliveries", "started_at", "status"])
    return bool(started)


def _park(run: Run, now: datetime) -> None:
    detail = (
        f"Parked after {run.deliveries - 1} deliveries: the worker died every time it ran this "
        "task (a poison task), so it is not run again."
    )
    envelope = {"status": "error", "failure_type": "unclassified", "detail": detail}
    run.record_outcome(envelope | {"retryable": False}, now, run.calls)
    after_commit_step(run.workflow_id)


def _call_source(run: Run, run_clock: Clock) -> tuple[dict[str, Any], int]:
    reg = registry()
    source = reg.get(run.source)
    if source is None:
        detail = f"No source named {run.source!r} is registered in this worker."
        return {"status": "error", "failure_type": "unclassified", "detail": detail}, 0
    if source.refresher and _previous_failure(run) == "auth_failure":
        source.refresher()
    wf = run.workflow
    query = run.attempted | {"attempt": run.attempt, "faults": (wf.input or {}).get("faults", {})}
    others = [s for s in reg.sources_for(run.capability) if s != run.source]
    classifier = policy.current_classifier()
    outcome = call_with_recovery(
        source,
        query,
        classify=lambda exc: classifier.classify(exc, provider=run.source),
        clock=run_clock,
        not_before=lambda: budget.health(run.source).not_before,
        hold=lambda until: budget.hold(run.source, until),
        alternatives=others,
    )
    return outcome.envelope, outcome.calls


def _previous_failure(run: Run) -> str | None:
    if run.attempt <= 1:
        return None
    prev = Run.objects.attempts_of(run).filter(attempt__lt=run.attempt).last()
    return prev.failure_type if prev else None


def _record_health(source: str, envelope: dict[str, Any], now: datetime) -> None:
    if envelope.get("status") == "ok":
        budget.record_success(source)
    else:
        ftype = envelope.get("failure_type") or "unclassified"
        budget.record_failure(source, ftype, now, envelope.get("retry_after"))


# ---------------------------------------------------------------------------------------------
# The coordinator step


def step(workflow_id: int, review_item_id: int | None = None) -> str:
    """Advance one workflow as far as its runs allow; return its status afterwards."""
    with transaction.atomic():
        wf = Workflow.objects.select_for_update().filter(pk=workflow_id).first()
        if wf is None:
            return "missing"
        # Every resolution not applied yet, not only the one this step was sent for: a step that
        # settles the workflow must not leave a decision behind, and a lost step is made good by
        # the sweeper's next nudge. Each is applied once (`continued_at` is the guard).
        pending = set(_unapplied_resolutions(wf))
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
        after_commit_dispatch(wf.pk)
        return wf.status


def _fan_out(wf: Workflow) -> None:
    for topic in wf.topics:
        for source in registry().sources_for(wf.capability)[: wf.breadth]:
            _first_attempt(wf, topic, source)


def _query(wf: Workflow, topic: str) -> dict[str, Any]:
    return {"operation": wf.capability, "query": f"{wf.goal or wf.name}: {topic}", "topic": topic}


def _first_attempt(
    wf: Workflow,
    topic: str,
    source: str,
    attempted: dict | None = None,
    switched_from: Run | None = None,
) -> None:
    """Create the first attempt of a (topic, source) slot; a second create is a no-op."""
    run = Run(
        switched_from=switched_from,
        workflow=wf,
        topic=topic,
        capability=wf.capability,
        agent=f"{wf.capability}-agent",
        source=source,
        operation=wf.capability,
        attempted=(attempted or _query(wf, topic)) | {"source": source},
        status=Run.Status.QUEUED,
        due_at=clock.now(),
        created_at=clock.now(),
        slot=f"{wf.pk}:{topic}:{source}",
    )
    Run.objects.bulk_create([run], ignore_conflicts=True)  # ON CONFLICT DO NOTHING on the slot


def _retry(run: Run, delay: float, attempted: dict | None = None) -> None:
    """Create the next attempt of `run`'s task, due after `delay`; a second create is a no-op."""
    last = Run.objects.attempts_of(run).order_by("-attempt").values_list("attempt", flat=True)
    now = clock.now()
    base = max(now, run.finished_at or now)  # a Retry-After counts from the failure, never earlier
    retry = Run(
        workflow_id=run.workflow_id,
        topic=run.topic,
        capability=run.capability,
        agent=run.agent,
        source=run.source,
        operation=run.operation,
        attempted=attempted if attempted is not None else run.attempted,
        attempt=max(last.first() or run.attempt, run.attempt) + 1,
        retry_of_id=run.root_id,
        status=Run.Status.QUEUED,
        due_at=base + timedelta(seconds=delay),
        created_at=now,
    )
    Run.objects.bulk_create([retry], ignore_conflicts=True)  # ON CONFLICT on (retry_of, attempt)


def route_context(wf: Workflow | None, run: Run) -> routing.Context:
    reg = registry()
    alternative = None
    if wf is not None:
        tried = set(wf.runs.filter(topic=run.topic).values_list("source", flat=True))
        alternative = reg.next_source(run.capability, tried)
    refreshed = run.failure_type == "auth_failure" and _previous_failure(run) == "auth_failure"
    return routing.Context(
        source=run.source,
        has_alternative=alternative is not None,
        can_refresh=reg.has_refresher(run.source),
        refreshed=refreshed,
        partial_count=run.partial_count,
        poisoned=run.deliveries > MAX_DELIVERIES,
    )


def decide_for(wf: Workflow | None, run: Run) -> routing.Decision:
    """Decide about a failed run with the current policy, paying the retry budget if it retries."""
    snap = policy.current_snapshot()
    ctx = route_context(wf, run)
    state = budget.state(run.source)
    now = clock.now()
    facts = {"failure_type": run.failure_type, "retry_after": run.retry_after}
    facts |= {"status_code": run.status_code}
    decision = routing.decide(facts, run.attempt, snap, state, ctx, now=now)
    if decision.action == routing.RETRY and not budget.try_spend(run.source, decision.budget_cost):
        decision = routing.decide(facts, run.attempt, snap, replace(state, tokens=0), ctx, now=now)
    return decision


def _route(wf: Workflow, run: Run) -> None:
    decision = decide_for(wf, run)
    if not run.record_decision(decision.action, decision.reason, decision.policy_version):
        return
    if decision.action == routing.RETRY:
        _retry(run, decision.delay_seconds)
    elif decision.action == routing.SWITCH_SOURCE:
        _switch(wf, run)
    elif decision.action == routing.ESCALATE:
        escalate(run, decision.reason, decision.failure_type)


def _switch(wf: Workflow, run: Run) -> bool:
    tried = set(wf.runs.filter(topic=run.topic).values_list("source", flat=True))
    nxt = registry().next_source(wf.capability, tried)
    if nxt is None:
        return False
    attempted = {k: v for k, v in run.attempted.items() if k != "source"}
    _first_attempt(wf, run.topic, nxt, attempted or None, switched_from=run)
    return True


# ---------------------------------------------------------------------------------------------
# Escalation and review continuation

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_HEX = re.compile(r"\b0x[0-9a-f]+\b", re.I)
_DIGITS = re.compile(r"\d+")


def normalise_detail(detail: str) -> str:
    """Strip what varies between two occurrences of the same error: ids, quotes, numbers."""
    text = _UUID.sub("<id>", detail or "")
    text = _QUOTED.sub("<q>", text)
    text = _HEX.sub("<n>", text)
    text = _DIGITS.sub("<n>", text)
    return " ".join(text.lower().split())


def signature(source: str, failure_type: str | None, detail: str) -> str:
    raw = f"{source}|{failure_type or 'unclassified'}|{normalise_detail(detail)}"
    return hashlib.sha256(raw.encode()).hexdigest()


def escalate(run: Run, reason: str, failure_type: str | None = None) -> ReviewItem | None:
    """Open a review item for a failed run (once) and mark the run escalated."""
    if not run.transition((Run.Status.FAILED,), Run.Status.ESCALATED):
        return None
    ftype = run.failure_type or failure_type or "unclassified"
    rule = policy.current_snapshot().rule(ftype)
    now = clock.now()
    return ReviewItem.objects.create(
        run=run,
        workflow_id=run.workflow_id,
        reason=reason + (f"\n\nRaw detail: {run.detail}" if run.detail else ""),
        failure_type=ftype,
        signature=signature(run.source, ftype, run.detail),
        deadline_at=now + timedelta(seconds=rule.review_deadline),
        created_at=now,
    )


def _apply_resolution(wf: Workflow, item_id: int) -> None:
    """Apply a resolved item's decision exactly once (`continued_at` is the guard)."""
    now = clock.now()
    won = ReviewItem.objects.filter(
        pk=item_id, state=ReviewItem.State.RESOLVED, continued_at__isnull=True
    ).update(continued_at=now)
    if not won or wf.is_finished:
        return
    item = ReviewItem.objects.select_related("run").get(pk=item_id)
    run, res = item.run, item.resolution
    if res == ReviewItem.Resolution.RETRY:
        _retry(run, 0)
    elif res == ReviewItem.Resolution.RETRY_EDITED:
        _retry(run, 0, attempted=run.attempted | (item.edited_input or {}))
    elif res == ReviewItem.Resolution.SWITCH_SOURCE:
        _switch(wf, run)


# ---------------------------------------------------------------------------------------------
# Settling


def _settle(wf: Workflow) -> None:
    runs = list(wf.runs.all())
    undecided = any(r.status == Run.Status.FAILED and not r.decision for r in runs)
    if undecided or any(r.status in PENDING_RUN for r in runs):
        if wf.status == Workflow.Status.AWAITING_REVIEW and not _has_open_reviews(wf):
            wf.move_to(Workflow.Status.RUNNING)
        return
    if _has_open_reviews(wf):
        if wf.status != Workflow.Status.AWAITING_REVIEW:
            wf.move_to(Workflow.Status.AWAITING_REVIEW)
        return
    cov = workflow_coverage(wf, runs)
    wf.move_to(
        final_status(cov, runs),
        coverage=cov,
        coverage_summary=coverage.summarise(cov),
        finished_at=clock.now(),
    )


def _unapplied_resolutions(wf: Workflow) -> list[int]:
    return list(
        wf.review_items.filter(
            state=ReviewItem.State.RESOLVED, continued_at__isnull=True
        ).values_list("pk", flat=True)
    )


def _has_open_reviews(wf: Workflow) -> bool:
    """Items still waiting for a human, or resolved but not yet applied by a step: a decision
    committed after this step read the resolutions must not find its workflow already settled."""
    pending = Q(state__in=ReviewItem.PENDING) | Q(
        state=ReviewItem.State.RESOLVED, continued_at__isnull=True
    )
    return wf.review_items.filter(pending).exists()


def workflow_coverage(wf: Workflow, runs: Iterable[Run] | None = None) -> dict[str, Any]:
    """Per topic of the workflow: verdict, supporting runs, and why (see coverage.py)."""
    runs = list(wf.runs.all() if runs is None else runs)
    reviews = {i.run_id: i for i in ReviewItem.objects.filter(workflow=wf)}
    by_topic: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_topic[run.topic].append(run)
    topics = list(wf.topics) or list(by_topic)
    return {t: coverage.topic_coverage(t, by_topic.get(t, []), reviews) for t in topics}


def final_status(cov: dict[str, Any], runs: list[Run]) -> str:
    """failed: every source failed; degraded: a gap, a failed empty, partial-only support."""
    anything = any(r.status == Run.Status.SUCCEEDED for r in runs) or any(
        e["partial_results"] for e in cov.values()
    )
    if not anything:
        return Workflow.Status.FAILED
    return (
        Workflow.Status.DEGRADED if any(map(_degraded, cov.values())) else Workflow.Status.SUCCEEDED
    )


def _degraded(entry: dict[str, Any]) -> bool:
    """A gap, an empty that a failure may explain, or support made of partial results only."""
    if entry["verdict"] == coverage.GAP:
        return True
    if entry["verdict"] == coverage.EMPTY:
        return bool(entry["failures"])
    return entry["results"] == 0


# ---------------------------------------------------------------------------------------------
# Bulk operator actions (the dashboard's; permission checks stay in its views)


def _label(actor: Any) -> str:
    return getattr(actor, "get_username", lambda: "")() or str(actor or "system")


def retry_runs(run_ids: list[int], actor: Any) -> int:
    """Queue a new attempt of each finished, unsuccessful run now; return how many were queued."""
    done = 0
    finished = (Run.Status.FAILED, Run.Status.ESCALATED, Run.Status.CANCELLED)
    for run in Run.objects.filter(pk__in=run_ids, status__in=finished).order_by("pk"):
        with transaction.atomic():
            before = Run.objects.attempts_of(run).count()
            _retry(run, 0)
            if Run.objects.attempts_of(run).count() == before:
                continue
            Run.objects.filter(pk=run.pk, decision="").update(
                decision=routing.RETRY, decision_reason=f"Retried by {_label(actor)}."
            )
            _reopen(run.workflow_id)
            AuditEntry.record(
                actor=actor,
                action="run.retry",
                obj=run,
                before={"status": run.status},
                after={"retry_attempt": before + 1},
            )
            after_commit_dispatch(run.workflow_id)
            after_commit_step(run.workflow_id)
            done += 1
    return done


def _reopen(workflow_id: int | None) -> None:
    """A retried run can change a settled workflow's coverage: let the coordinator settle again."""
    if workflow_id:
        Workflow.objects.filter(
            pk=workflow_id, status__in=(Workflow.Status.SUCCEEDED, Workflow.Status.DEGRADED)
        ).update(status=Workflow.Status.RUNNING, finished_at=None)


def cancel_runs(run_ids: list[int], actor: Any) -> int:
    """Cancel queued or running runs (a running task's result is then discarded); return count."""
    done = 0
    for run in Run.objects.filter(pk__in=run_ids, status__in=PENDING_RUN).order_by("pk"):
        with transaction.atomic():
            old = run.status
            if not run.transition(PENDING_RUN, Run.Status.CANCELLED, finished_at=clock.now()):
                continue
            run.record_decision(routing.ABORT, f"Cancelled by {_label(actor)}.", None)
            AuditEntry.record(
                actor=actor,
                action="run.cancel",
                obj=run,
                before={"status": old},
                after={"status": "cancelled"},
            )
            after_commit_step(run.workflow_id)
            done += 1
    return done


def escalate_runs(run_ids: list[int], actor: Any, reason: str = "") -> int:
    """Send failed runs to human review; return how many review items were opened."""
    done = 0
    for run in Run.objects.filter(pk__in=run_ids, status=Run.Status.FAILED).order_by("pk"):
        with transaction.atomic():
            why = reason or f"Escalated by {_label(actor)}."
            Run.objects.filter(pk=run.pk).filter(
                Q(decision="") | ~Q(decision=routing.ESCALATE)
            ).update(decision=routing.ESCALATE, decision_reason=why)
            item = escalate(run, why)
            if item is None:
                continue
            _reopen(run.workflow_id)
            AuditEntry.record(
                actor=actor,
                action="run.escalate",
                obj=run,
                before={"status": "failed"},
                after={"status": "escalated", "review_item": item.pk},
                note=reason,
            )
            after_commit_step(run.workflow_id)
            done += 1
    return done
