"""Operators' actions, one `do_*` function each: retry, cancel or escalate runs; abort a
workflow; claim or resolve a review item; restore a policy version.

Each reads top to bottom in one transaction: the conditional update (the model's transition,
which one caller wins), the audit row naming the `channel` the action came from, the
notification, and the workflow's continuation (an outbox message sent after the commit, applied
once by its ids). Every way in calls these (the dashboard's views now, chat and e-mail next,
the admin and the API as they gain operator verbs): no step of an action waits in a signal
receiver."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction

from orchestrator import notify, scrubbing
from orchestrator.coordination import budget, clock, delivery, dispatch, policy_changes
from orchestrator.coordination.escalation import escalate
from orchestrator.coordination.workflow import reopen, retry
from orchestrator.models import (
    AuditEntry,
    PolicyVersion,
    ReviewItem,
    Run,
    Workflow,
    actor_label,
)
from orchestrator.vocabulary import Action, Channel, Vocabulary


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


# Runs


def do_retry_runs(run_ids: list[int], actor: Any, *, channel: Channel) -> int:
    """Queue a new attempt of each finished, unsuccessful run now; return how many were queued
    (or, for an agent's run, handed back to its agent: `_hand_back_retry`)."""
    done = 0
    runs = list(Run.objects.filter(pk__in=run_ids, status__in=RunAction.RETRY.statuses))
    settled = Run.objects.settled_tasks({run.root_id for run in runs})
    for run in sorted(runs, key=lambda r: r.pk):
        if run.root_id in settled:
            continue  # succeeded, pending, or retried already in this call
        settled.add(run.root_id)
        if run.is_reported:
            done += _hand_back_retry(run, actor, channel)
            continue
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
                channel=channel,
            )
            dispatch.dispatch_due(workflow_id=run.workflow_id)
            dispatch.step(run.workflow_id)
            done += 1
    return done


def _hand_back_retry(run: Run, actor: Any, channel: Channel) -> bool:
    """An agent's run is the agent's to call again: no worker here runs its task, so a queued
    copy would wait forever. The retry reaches the agent as a review resolution instead, which it
    picks up (`GET /reviews?delivered=false`, MCP `list_resolutions`, its webhook) as it would an
    operator's; a failed run is escalated for it first. False for a run no item can carry."""
    why = f"Retry asked by {actor_label(actor)}: the agent that reported the run calls it again."
    before = {"status": run.status}
    with transaction.atomic():
        item = escalate(run, why)
        if item is not None:
            reopen(run.workflow_id)
        else:
            pending = run.review_items.filter(state__in=ReviewItem.PENDING, blocking=True)
            item = pending.order_by("pk").first()
        if item is None:
            return False
        resolved = do_resolve_review(item, actor, ReviewItem.Resolution.RETRY, channel=channel)
        if resolved:
            AuditEntry.record(
                actor=actor,
                action="run.retry",
                obj=run,
                before=before,
                after={"handed_to_agent": True, "review_item": item.pk},
                channel=channel,
            )
    return bool(resolved)


def do_cancel_runs(run_ids: list[int], actor: Any, *, channel: Channel) -> int:
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
                channel=channel,
            )
            dispatch.step(run.workflow_id)
            done += 1
    return done


def do_escalate_runs(run_ids: list[int], actor: Any, *, channel: Channel, reason: str = "") -> int:
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
                channel=channel,
            )
            dispatch.step(run.workflow_id)
            done += 1
    return done


def do_run_action(
    action: str, run_ids: list[int], actor: Any, *, channel: Channel, reason: str = ""
) -> int:
    """Retry, cancel or escalate runs; return how many were acted on."""
    if action == RunAction.ESCALATE:
        return do_escalate_runs(run_ids, actor, channel=channel, reason=reason)
    if action == RunAction.CANCEL:
        return do_cancel_runs(run_ids, actor, channel=channel)
    return do_retry_runs(run_ids, actor, channel=channel)


# Workflows


def do_abort_workflow(workflow_id: int, actor: Any, *, channel: Channel, note: str = "") -> bool:
    """Stop a workflow: its pending runs are cancelled and it fails; False if it had finished."""
    with transaction.atomic():
        wf = Workflow.objects.select_for_update().filter(pk=workflow_id).first()
        if wf is None or wf.is_finished:
            return False
        before = {"status": wf.status}
        now = clock.now()
        wf.runs.pending().update(status=Run.Status.CANCELLED, finished_at=now)
        summary = f"Aborted by {actor_label(actor)}" + (f": {note}" if note else "")
        wf.move_to(Workflow.Status.FAILED, finished_at=now, coverage_summary=summary)
        AuditEntry.record(
            actor=actor,
            action="workflow.abort",
            obj=wf,
            before=before,
            after={"status": Workflow.Status.FAILED},
            note=note,
            channel=channel,
        )
    return True


# Review items


def do_claim_review(item: ReviewItem, user: Any, *, channel: Channel) -> bool:
    """Claim an open item for `user`; True if they hold it now (a second claim by them too)."""
    with transaction.atomic():
        if item.claim(user):
            AuditEntry.record(
                actor=user,
                action="review.claim",
                obj=item,
                before={"state": ReviewItem.State.OPEN, "assignee": None},
                after={"state": item.state, "assignee": item.assignee_id},
                channel=channel,
            )
    return item.is_held_by(user)


def do_resolve_review(
    item: ReviewItem,
    user: Any,
    resolution: str,
    *,
    channel: Channel,
    note: str = "",
    edited_input: dict | None = None,
    failure_type: str | None = None,
    save_override: bool = False,
    apply_to_group: bool = False,
) -> int:
    """Resolve `item` (with `apply_to_group`, every pending item like it that no other operator
    holds) and continue each one's work; with `save_override` also save a provider override
    from its raw error. Return how many items were resolved (0: someone was first).

    The edited input's and the note's secrets are filtered before they are kept: a credential
    belongs in the agent's own store, never in a resolution that pages, webhooks and the API
    show."""
    edited_input = scrubbing.scrub_data(edited_input)
    note = scrubbing.scrub_text(note)
    with transaction.atomic():
        won = item.mark_resolved(
            user,
            resolution,
            note=note,
            edited_input=edited_input,
            failure_type=failure_type,
            apply_to_group=apply_to_group,
        )
        for resolved, before in won:
            AuditEntry.record(
                actor=user,
                action="review.resolve",
                obj=resolved,
                before=before,
                after=resolved.snapshot(),
                note=note,
                channel=channel,
            )
            _reenable_if_repaired(resolved, user, channel)
            _continue_after_resolution(resolved)
        if won and save_override and failure_type:
            policy_changes.save_override_from_review(item, user, failure_type, note, channel)
    return len(won)


def do_apply_review_fallback(item: ReviewItem, action: str, note: str, now: datetime) -> int:
    """Resolve an item left past its deadline with its failure type's fallback `action` and
    continue its work; 1 if this call won, 0 if an operator was first."""
    with transaction.atomic():
        before = item.mark_resolved_by_fallback(action, note, now)
        if before is None:
            return 0
        AuditEntry.record(
            actor="system",
            action="review.fallback",
            obj=item,
            before=before,
            after=item.snapshot(),
            note=note,
            channel=Channel.SYSTEM,
        )
        _continue_after_resolution(item)
    return 1


REENABLING = (ReviewItem.Resolution.REENABLE_SOURCE, ReviewItem.Resolution.RETRY)


def _reenable_if_repaired(item: ReviewItem, user: Any, channel: Channel) -> None:
    """A repair item resolved as repaired re-enables its source for whatever comes next,
    whoever coordinates the work (the source's health is the server's), audited."""
    if item.blocking or item.resolution not in REENABLING:
        return
    row, before = budget.reenable(item.source or item.run.source, clock.now())
    AuditEntry.record(
        actor=user,
        action="source.reenable",
        obj=row,
        before=before,
        after=row.repair_state(),
        note=f"Repaired, by review item #{item.pk}.",
        channel=channel,
    )


def _continue_after_resolution(item: ReviewItem) -> None:
    """Wake whoever waits on the item (`GET /reviews/{id}?wait=`), then hand the resolution on:
    the built-in coordinator's step applies it (once, by the item's id), an agent's own
    coordinator gets it by its webhook or picks it up. Both leave only after the commit."""
    notify.announce(notify.REVIEW_RESOLVED, item.pk)
    if item.is_built_in:
        dispatch.step(item.workflow_id, item.pk)
    else:
        delivery.queue_webhook(item)


# Policies


def do_restore_policy_version(
    number: int, actor: Any, *, channel: Channel, note: str = ""
) -> PolicyVersion:
    """Write version `number`'s routing table, overrides and scrub rules back as a new version,
    audited; raise PolicyVersion.DoesNotExist for an unknown version.

    Never a rewind: decisions recorded under the versions in between keep their meaning."""
    note = note or f"restored version {number}"
    with transaction.atomic():
        before = policy_changes.lock_versions()
        target = PolicyVersion.objects.get(version=number)
        policy_changes.write_back(target)
        restored = policy_changes.capture_restore(actor, note, restored_from=number)
        AuditEntry.record(
            actor=actor,
            action="policyversion.restore",
            obj=restored,
            before={"version": before},
            after={"version": restored.version, "restored_from": number},
            note=note,
            channel=channel,
        )
    return restored
