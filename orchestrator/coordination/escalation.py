"""Opening review items: the valve for what routing cannot decide.

A failed run is escalated once (a conditional status change), and its review item carries the
run's failure signature (`orchestrator.fingerprint`: source, failure type and the detail with ids,
quotes and numbers taken out), so the queue can group the same error, resolve a whole group at
once, and lead to the failure group of the same key. Resolving an item is the model's job
(`ReviewItem.resolve`); continuing the workflow afterwards is `review`'s and `workflow`'s.
"""

from __future__ import annotations

from datetime import timedelta

from orchestrator.coordination import clock, policy
from orchestrator.fingerprint import signature
from orchestrator.models import ReviewItem, Run
from orchestrator.vocabulary import FailureCategory


def escalate(run: Run, reason: str, failure_type: str | None = None) -> ReviewItem | None:
    """Open a review item for a failed run (once) and mark the run escalated."""
    if not run.transition((Run.Status.FAILED,), Run.Status.ESCALATED):
        return None
    ftype = run.failure_type or failure_type or FailureCategory.UNCLASSIFIED
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
