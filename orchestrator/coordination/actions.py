"""Operators' actions on runs: retry now, cancel, send to human review. Audited, one row each."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from orchestrator.coordination import clock, dispatch
from orchestrator.coordination.escalation import escalate
from orchestrator.coordination.workflow import reopen, retry
from orchestrator.models import AuditEntry, Run, actor_label
from orchestrator.vocabulary import Action, Vocabulary


class RunAction(Vocabulary):
    """What an operator may do to runs from the runs list or a run's page."""

    RETRY = "retry"
    CANCEL = "cancel"
    ESCALATE = "escalate"

    @property
    def statuses(self) -> tuple[str, ...]:
        return APPLIES_TO[self]


APPLIES_TO = {
    RunAction.RETRY: tuple(Run.RETRYABLE_BY_OPERATOR),
    RunAction.CANCEL: tuple(Run.PENDING),
    RunAction.ESCALATE: (Run.Status.FAILED,),
}


def applicable(run: Run, settled: bool = False) -> list[RunAction]:
    """The actions `run` can take; a retry only while its task is `settled` by no other run."""
    return [
        action
        for action, statuses in APPLIES_TO.items()
        if run.status in statuses and not (action == RunAction.RETRY and settled)
    ]


def with_actions(runs: list[Run]) -> list[Run]:
    """Set `actions` on each run, its task's other runs asked in two queries for all."""
    retryable = {run.root_id for run in runs if run.status in RunAction.RETRY.statuses}
    settled = Run.objects.settled_tasks(retryable)
    for run in runs:
        run.actions = applicable(run, run.root_id in settled)
    return runs


def retry_runs(run_ids: list[int], actor: Any) -> int:
    """Queue a new attempt of each finished, unsuccessful run now; return how many were queued."""
    done = 0
    runs = list(Run.objects.filter(pk__in=run_ids, status__in=RunAction.RETRY.statuses))
    settled = Run.objects.settled_tasks({run.root_id for run in runs})
    for run in sorted(runs, key=lambda r: r.pk):
        if run.root_id in settled:
            continue  # succeeded, pending, or retried already in this call
        settled.add(run.root_id)
        with transaction.atomic():
            if not retry(run, 0):
                continue
            Run.objects.filter(pk=run.pk, decision="").update(
                decision=Action.RETRY, decision_reason=f"Retried by {actor_label(actor)}."
            )
            reopen(run.workflow_id)
            attempts = Run.objects.attempts_of(run).count()
            AuditEntry.record(
                actor=actor,
                action="run.retry",
                obj=run,
                before={"status": run.status},
                after={"retry_attempt": attempts},
            )
            dispatch.dispatch_due(workflow_id=run.workflow_id)
            dispatch.step(run.workflow_id)
            done += 1
    return done


def cancel_runs(run_ids: list[int], actor: Any) -> int:
    """Cancel queued or running runs (a running task's result is then discarded); return count."""
    done = 0
    runs = Run.objects.filter(pk__in=run_ids, status__in=RunAction.CANCEL.statuses)
    for run in runs.order_by("pk"):
        with transaction.atomic():
            old = run.status
            if not run.transition(Run.PENDING, Run.Status.CANCELLED, finished_at=clock.now()):
                continue
            run.record_decision(Action.ABORT, f"Cancelled by {actor_label(actor)}.", None)
            AuditEntry.record(
                actor=actor,
                action="run.cancel",
                obj=run,
                before={"status": old},
                after={"status": Run.Status.CANCELLED},
            )
            dispatch.step(run.workflow_id)
            done += 1
    return done


def escalate_runs(run_ids: list[int], actor: Any, reason: str = "") -> int:
    """Send failed runs to human review; return how many review items were opened."""
    done = 0
    runs = Run.objects.filter(pk__in=run_ids, status__in=RunAction.ESCALATE.statuses)
    for run in runs.order_by("pk"):
        with transaction.atomic():
            why = reason or f"Escalated by {actor_label(actor)}."
            run.overrule_decision(Action.ESCALATE, why)
            item = escalate(run, why)
            if item is None:
                continue
            reopen(run.workflow_id)
            AuditEntry.record(
                actor=actor,
                action="run.escalate",
                obj=run,
                before={"status": Run.Status.FAILED},
                after={"status": Run.Status.ESCALATED, "review_item": item.pk},
                note=reason,
            )
            dispatch.step(run.workflow_id)
            done += 1
    return done


def act_on_runs(action: str, run_ids: list[int], actor: Any, reason: str = "") -> int:
    """Retry, cancel or escalate runs; return how many were acted on."""
    if action == RunAction.ESCALATE:
        return escalate_runs(run_ids, actor, reason=reason)
    if action == RunAction.CANCEL:
        return cancel_runs(run_ids, actor)
    return retry_runs(run_ids, actor)
