"""The dashboard's calls into the coordinator, in one place.

The coordinator owns every state change (claiming and resolving review items, retrying,
cancelling and escalating runs) and the retry-delay preview; the dashboard only passes the
operator's choice on, after its views have checked the permission.
"""

from __future__ import annotations

from typing import Any

from orchestrator import coordinator, policy, review
from orchestrator.models import ReviewItem, RoutingPolicy


def act_on_runs(action: str, run_ids: list[int], actor: Any, reason: str = "") -> int:
    """Retry, cancel or escalate runs; return how many the coordinator acted on."""
    if not run_ids:
        return 0
    if action == "escalate":
        return coordinator.escalate_runs(run_ids, actor, reason=reason)
    if action == "cancel":
        return coordinator.cancel_runs(run_ids, actor)
    return coordinator.retry_runs(run_ids, actor)


def abort_workflow(workflow_id: int, actor: Any, note: str) -> bool:
    """Stop a workflow (its pending runs are cancelled, the change audited); False if finished."""
    return coordinator.abort_workflow(workflow_id, actor, note=note)


def claim(item: ReviewItem, user: Any) -> bool:
    return review.claim(item, user)


def resolve(item: ReviewItem, user: Any, data: dict[str, Any]) -> int:
    """Resolve with the form's cleaned data; return how many items were resolved (0: too late)."""
    return review.resolve(
        item,
        user,
        data["resolution"],
        note=data["note"],
        # The form pre-fills the original input; it only counts for "retry with edited input".
        edited_input=data.get("edited_input") if data["resolution"] == "retry_edited" else None,
        failure_type=data.get("failure_type") or None,
        save_override=bool(data.get("save_override")),
        apply_to_group=bool(data.get("apply_to_group")),
    )


def preview_delays(rule: RoutingPolicy) -> list[tuple[int, float, float]]:
    """[(attempt, min_delay, max_delay)] for the retries this policy allows."""
    return list(policy.preview_delays(rule))
