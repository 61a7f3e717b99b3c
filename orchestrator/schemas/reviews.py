"""The schemas of the review routes: review items, their resolutions, filters and long poll."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from ninja import Schema
from pydantic import (
    Field,
    StringConstraints,
)

from classifier import FailureCategory
from orchestrator.models import ReviewItem
from orchestrator.schemas.common import (
    NoNul,
    RunId,
)


class ReviewIn(Schema):
    run: RunId = Field(description="A failed run this token's agent reported")
    reason: Annotated[str, StringConstraints(min_length=1, max_length=2000)] = Field(
        description="What the reviewer should know"
    )


class ResolutionOut(Schema):
    action: ReviewItem.Resolution
    input: dict[str, Any] | None = Field(description="retry_edited: the input to retry with")
    source: str | None = Field(description="switch_source: the source to switch to, when known")
    failure_type: FailureCategory | None = Field(
        description="The failure type the operator reclassified the failure as, if they did"
    )
    note: str
    resolved_by: str | None = Field(description="The operator; null for the deadline fallback")
    resolved_at: datetime


class ReviewOut(Schema):
    id: int
    state: ReviewItem.State
    run: int
    workflow: int | None
    reason: str
    blocking: bool = Field(
        True,
        description="Work waits on it; false: a repair of the failing source, asked while the "
        "work went on on another (the policy's switch_and_escalate)",
    )
    resolution: ResolutionOut | None
    delivered_at: datetime | None = Field(description="When the agent picked the resolution up")


class ReviewListOut(Schema):
    items: list[ReviewOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page")


class ReviewFilters(Schema):
    """GET /reviews: this token's review items (of the runs it reported)."""

    state: ReviewItem.State | None = None
    delivered: bool | None = Field(
        None, description="false: resolutions not acknowledged yet (POST /reviews/{id}/ack)"
    )
    blocking: bool | None = Field(
        None, description="true: only items work waits on; false: only repairs nothing waits on"
    )
    all_tokens: bool = Field(
        False,
        description="true: every item this token may read (those of the workflows it started; "
        "with the read:all scope, every token's), not only its own",
    )
    cursor: Annotated[str, NoNul] | None = Field(None, max_length=200)
    limit: int = Field(50, ge=1, le=500)


class ReviewWait(Schema):
    wait: float = Field(
        0,
        ge=0,
        le=30,
        description="Seconds to wait for a resolution (at most 30): the answer comes as soon as "
        "the item is resolved, or after that long with its state then",
    )
