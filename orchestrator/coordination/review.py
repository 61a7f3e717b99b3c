"""Human review, on the coordinator's side: continuing after a resolution, and overdue fallbacks.

Claiming and resolving are the model's (`ReviewItem.claim`, `ReviewItem.resolve`: conditional
updates with an audit row); the model announces each resolution with the `review_resolved` signal,
and the receiver here sends the workflow's step after commit, which applies the decision once
(`workflow._apply_resolution`). Items left undecided past their deadline get their failure type's
fallback from the routing policy.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.dispatch import receiver

from orchestrator.coordination import clock, dispatch, policy
from orchestrator.models import ReviewItem, review_resolved
from orchestrator.vocabulary import FailureCategory


@receiver(review_resolved, dispatch_uid="coordination.review.continue_workflow")
def continue_workflow(sender: Any, item: ReviewItem, **kwargs: Any) -> None:
    """Send the step that applies `item`'s resolution, once the resolution commits."""
    dispatch.after_commit_step(item.workflow_id, item.pk)


def apply_overdue_fallbacks(now: datetime | None = None) -> int:
    """Resolve every pending item past its deadline with its failure type's fallback action."""
    now = now or clock.now()
    snap = policy.current_snapshot()
    done = 0
    for item in ReviewItem.objects.overdue(now)[:500]:
        action = snap.rule(item.failure_type or FailureCategory.UNCLASSIFIED).review_fallback
        note = f"No decision before the deadline; the {action} fallback applied."
        with transaction.atomic():
            done += item.resolve_by_fallback(action, note, now)
    return done
