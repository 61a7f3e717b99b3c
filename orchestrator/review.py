"""Human review: claiming and resolving escalations, and the fallback for overdue ones.

Resolving is a conditional update (open or claimed → resolved) so exactly one operator wins, even
on a double click; the winner's audit row and the coordinator's continuation are written in the
same transaction and sent after commit. The continuation applies the decision once (see
`coordinator._apply_resolution`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from orchestrator import coordinator
from orchestrator.models import (
    AuditEntry,
    FailureType,
    ProviderOverride,
    ReviewItem,
    save_policy_change,
)

Resolution = ReviewItem.Resolution


def claim(item: ReviewItem, user: Any) -> bool:
    """Claim an open item; True if `user` holds it afterwards."""
    return item.claim(user)


def resolve(
    item: ReviewItem,
    user: Any,
    resolution: str,
    note: str = "",
    edited_input: dict | None = None,
    failure_type: str | None = None,
    save_override: bool = False,
    apply_to_group: bool = False,
) -> int:
    """Resolve the item (and, if asked, every pending item with its signature); return how many.

    For an unclassified item, `failure_type` reclassifies it and `save_override` saves a provider
    override so the next such error classifies itself.
    """
    if resolution not in Resolution.values:
        raise ValueError(f"unknown resolution {resolution!r}")
    if failure_type is not None and failure_type not in FailureType.values:
        raise ValueError(f"unknown failure type {failure_type!r}")
    with transaction.atomic():
        items = [item]
        if apply_to_group and item.signature:
            items += list(ReviewItem.objects.with_signature(item.signature).exclude(pk=item.pk))
        changes = dict(
            resolution=resolution, note=note, edited_input=edited_input, resolved_by=user
        )
        resolved = sum(_resolve_one(i, user, changes, failure_type) for i in items)
        if resolved and save_override and failure_type:
            _save_override(item, user, failure_type, note)
    return resolved


def _resolve_one(
    item: ReviewItem,
    actor: Any,
    changes: dict[str, Any],
    failure_type: str | None = None,
    fallback: bool = False,
) -> int:
    before = item.snapshot()
    fields = changes | {"state": ReviewItem.State.RESOLVED, "resolved_at": timezone.now()}
    if failure_type and item.failure_type == FailureType.UNCLASSIFIED:
        fields["failure_type"] = failure_type
    if fallback:
        fields["fallback_applied"] = True
    won = ReviewItem.objects.filter(pk=item.pk, state__in=ReviewItem.PENDING).update(**fields)
    if not won:
        return 0
    item.refresh_from_db()
    AuditEntry.record(
        actor=actor,
        action="review.fallback" if fallback else "review.resolve",
        obj=item,
        before=before,
        after=item.snapshot(),
        note=changes.get("note", ""),
    )
    coordinator.after_commit_step(item.workflow_id, item.pk)
    return 1


def _save_override(item: ReviewItem, user: Any, failure_type: str, note: str) -> int | None:
    """Turn the item's raw error into a provider override, through the audited policy path."""
    run = item.run
    match_on, value = _best_signal(run.provider_code, run.status_code, run.exception_type)
    if not value:
        return None
    override = ProviderOverride.objects.filter(
        provider=run.source, match_on=match_on, match_value=value
    ).first() or ProviderOverride(provider=run.source, match_on=match_on, match_value=value)
    override.failure_type = failure_type
    override.enabled = True
    override.note = (note or f"From review item {item.pk}")[:300]
    if override.pk is None:
        override.created_by = user if getattr(user, "is_authenticated", False) else None
    return save_policy_change(override, user, note=f"saved from review item {item.pk}")


def _best_signal(provider_code: str, status_code: int | None, exception_type: str) -> tuple:
    """The most reliable signal the run carried: provider code, then status, then type name."""
    if provider_code:
        return ProviderOverride.MatchOn.PROVIDER_CODE, provider_code[:300]
    if status_code:
        return ProviderOverride.MatchOn.STATUS_CODE, str(status_code)
    return ProviderOverride.MatchOn.EXCEPTION_TYPE, (exception_type or "")[:300]


def apply_overdue_fallbacks(now: datetime | None = None) -> int:
    """Resolve every pending item past its deadline with its failure type's fallback action."""
    now = now or coordinator.clock.now()
    snap = coordinator.policy.current_snapshot()
    done = 0
    for item in ReviewItem.objects.overdue(now)[:500]:
        action = snap.rule(item.failure_type or "unclassified").review_fallback
        note = f"No decision before the deadline; the {action} fallback applied."
        with transaction.atomic():
            changes = {"resolution": action, "note": note, "resolved_by": None}
            done += _resolve_one(item, "system", changes, fallback=True)
    return done
