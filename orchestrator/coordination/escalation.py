"""Opening review items: the valve for what routing cannot decide.

A failed run is escalated once (a conditional status change), and its review item carries a
signature (source, failure type and the detail with ids, quotes and numbers taken out) so the queue
can group the same error and resolve a whole group at once. Resolving an item is the model's job
(`ReviewItem.resolve`); continuing the workflow afterwards is `review`'s and `workflow`'s.
"""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta

from orchestrator.coordination import clock, policy
from orchestrator.models import ReviewItem, Run
from orchestrator.vocabulary import FailureCategory

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
    """Return the hash that groups escalations of the same error from the same source."""
    ftype = failure_type or FailureCategory.UNCLASSIFIED
    raw = f"{source}|{ftype}|{normalise_detail(detail)}"
    return hashlib.sha256(raw.encode()).hexdigest()


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
