"""Resolutions delivered back to the agents that reported the runs: the shape an agent reads, and
the signed webhook to a token's callback URL, exactly once (whichever comes first, an ack or a
2xx). The webhook is queued in the resolving transaction (`actions.do_resolve_review`) and sent
by `webhooks`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orchestrator.coordination import webhooks
from orchestrator.coordination.registry import registry
from orchestrator.models import ReviewItem, WebhookDelivery


def resolution_payload(item: ReviewItem) -> dict[str, Any]:
    """The review item as `GET /api/v1/reviews/{id}` answers and a webhook posts it."""
    return {
        "id": item.pk,
        "state": item.state,
        "run": item.run_id,
        "workflow": item.workflow_id,
        "reason": item.reason,
        "blocking": item.blocking,
        "resolution": _resolution(item) if item.state == ReviewItem.State.RESOLVED else None,
        "delivered_at": _iso(item.delivered_at),
    }


def _resolution(item: ReviewItem) -> dict[str, Any]:
    res = item.resolution
    run = item.run
    reclassified = item.failure_type if item.failure_type != run.failure_type else None
    return {
        "action": res,
        "input": item.edited_input if res == ReviewItem.Resolution.RETRY_EDITED else None,
        "source": switch_target(item) if res == ReviewItem.Resolution.SWITCH_SOURCE else None,
        "failure_type": reclassified,
        "note": item.note,
        "resolved_by": item.resolved_by.get_username() if item.resolved_by else None,
        "resolved_at": _iso(item.resolved_at),
    }


def switch_target(item: ReviewItem) -> str | None:
    """The source a switch goes to, by the rule the operator was shown (`review._switch`)."""
    run, wf = item.run, item.workflow
    tried = wf.sources_tried(run.topic) if wf is not None else {run.source}
    suggestions = [a for a in run.alternatives if isinstance(a, str)]
    capability = run.capability or (wf.capability if wf is not None else "")
    target, _ = registry().switch_target(
        run.source, tried | {run.source}, suggestions, capability=capability or None
    )
    return target


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat().replace("+00:00", "Z") if moment else None


def queue_webhook(item: ReviewItem) -> None:
    """If the item's token has a callback URL, queue the resolution's webhook (once)."""
    if item.is_built_in or item.token_id is None:
        return
    token = item.token
    if not token.callback_url or not token.is_active:
        return
    if WebhookDelivery.objects.filter(item=item).exists():
        return
    webhooks.queue(
        WebhookDelivery.Event.REVIEW_RESOLVED,
        token.callback_url,
        resolution_payload(item),
        token.sealed_signing_secret,
        item=item,
        token=token,
    )
