"""Opening review items: the valve for what routing cannot decide. An item carries the run's
failure signature, so the queue can group the same error."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction

from orchestrator import scrubbing
from orchestrator.coordination import budget, clock, owners, policy
from orchestrator.fingerprint import signature
from orchestrator.models import AuditEntry, PolicyState, ReviewItem, Run
from orchestrator.vocabulary import Action, Channel, FailureCategory


class CannotEscalate(Exception):
    """The run is in no state to open a review item for."""


def escalate(run: Run, reason: str, failure_type: str | None = None) -> ReviewItem | None:
    """Open a review item for a failed run (once) and mark the run escalated."""
    if not run.transition((Run.Status.FAILED,), Run.Status.ESCALATED):
        return None
    return _open(run, reason, failure_type, blocking=True)


def ask_for_repair(run: Run, reason: str, failure_type: str | None = None) -> ReviewItem:
    """Ask a person to repair `run`'s source while the work goes on on another (the policy's
    switch and escalate): a review item that blocks no workflow (the run keeps its switch), and
    the source switched away from until its resolution re-enables it. One item per failure: the
    item still open for the same source and failure signature is returned instead of another."""
    ftype = run.failure_type or failure_type or FailureCategory.UNCLASSIFIED
    same = ReviewItem.objects.with_signature(signature(run.source, ftype, run.detail))
    existing = same.filter(blocking=False, project_id=run.project_id).first()
    if existing is not None:
        return existing
    item = _open(run, reason, ftype, blocking=False)
    budget.disable(run.source, f"review item #{item.pk} asks for its repair", item.created_at)
    return item


def _open(run: Run, reason: str, failure_type: str | None, blocking: bool) -> ReviewItem:
    ftype = run.failure_type or failure_type or FailureCategory.UNCLASSIFIED
    rule = policy.current_snapshot(run.project_id).rule(ftype)
    now = clock.now()
    item = ReviewItem.objects.create(
        run=run,
        workflow_id=run.workflow_id,
        project_id=run.project_id,
        reason=reason + (f"\n\nRaw detail: {run.detail}" if run.detail else ""),
        failure_type=ftype,
        signature=signature(run.source, ftype, run.detail),
        # Nothing waits on a repair, so no fallback decides it at a deadline.
        deadline_at=now + timedelta(seconds=rule.review_deadline) if blocking else None,
        created_at=now,
        blocking=blocking,
    )
    owners.assign(item, now)
    return item


def escalate_reported(run: Run, reason: str, actor: Any) -> tuple[ReviewItem, bool]:
    """An agent sends its own failed run to human review; return the item and whether it is new
    (a repeated or concurrent call gets the item still open). The reason's secrets are filtered
    before it is kept (`orchestrator.scrubbing`)."""
    reason = scrubbing.scrub_text(reason)
    with transaction.atomic():
        item = escalate(run, reason)
        if item is None:
            existing = run.review_items.filter(state__in=ReviewItem.PENDING).order_by("-id").first()
            if existing is not None:
                return existing, False
            run.refresh_from_db(fields=["status"])
            raise CannotEscalate(_why_not(run))
        why = f"Escalated by the agent: {reason}"
        if not run.record_decision(
            Action.ESCALATE, why, PolicyState.current_version(), now=item.created_at
        ):
            run.overrule_decision(Action.ESCALATE, why)
        AuditEntry.record(
            actor=actor,
            action="run.escalate",
            obj=run,
            before={"status": Run.Status.FAILED},
            after={"status": Run.Status.ESCALATED, "review_item": item.pk},
            note=reason,
            channel=Channel.API,
        )
    return item, True


def _why_not(run: Run) -> str:
    if run.status == Run.Status.ESCALATED:
        return f"Run {run.pk} was escalated and its review item is resolved already."
    if run.is_pending:
        return f"Run {run.pk} is {run.status}: finish it (PATCH /runs/{run.pk}) before escalating."
    return f"Run {run.pk} {run.status}: only a failed run is escalated."
