"""Request and response schemas of the REST API v1, with explicit fields.

Input schemas are plain pydantic models (no ORM access needed, and they validate faster than ninja's
`Schema`, which matters on the batch path); output schemas are ninja `Schema`s read from model rows.
String limits match the model columns, integer limits match the column types (PostgreSQL `integer`,
`smallint`, `bigint`), so nothing valid here can overflow or be truncated in the database.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SkipValidation,
    StringConstraints,
    field_validator,
)

from classifier import FailureCategory
from orchestrator.models import NAMED_SETS, Run

RunSetName = Enum("RunSetName", {name: name for name in NAMED_SETS}, type=str)
INT_MAX = 2**31 - 1  # PostgreSQL integer (attempt, result counts)
SMALLINT_MAX = 2**15 - 1  # PostgreSQL smallint (status_code)
BIGINT_MAX = 2**63 - 1  # PostgreSQL bigint (primary keys)

RunId = Annotated[int, Field(ge=1, le=BIGINT_MAX)]
NoNul = StringConstraints(pattern=r"^[^\x00]*$")


Name = Annotated[str, StringConstraints(min_length=1, max_length=100)]
Str100 = Annotated[str, StringConstraints(max_length=100)]
Str200 = Annotated[str, StringConstraints(max_length=200)]
Str255 = Annotated[str, StringConstraints(max_length=255)]
Str300 = Annotated[str, StringConstraints(max_length=300)]


# ---------------------------------------------------------------------------------------------
# Errors (the envelope every non-2xx answer uses)


class FieldErrorOut(Schema):
    path: str = Field(description="Dotted path of the invalid value, e.g. runs.3.failure_type")
    message: str


class AttemptedOut(Schema):
    operation: str = Field(description="METHOD path of the request that failed")


class ErrorOut(Schema):
    """The envelope of a failed API call: the same shape agents report their own failures in."""

    status: Literal["error"] = "error"
    failure_type: FailureCategory
    retryable: bool
    retry_after: float | None = Field(None, description="Seconds to wait, when known")
    detail: str
    errors: list[FieldErrorOut] = Field(default_factory=list, description="Per field, for 422")
    attempted: AttemptedOut
    partial_results: list[Any] = Field(default_factory=list)
    alternatives: list[str] = Field(default_factory=list, description="What could be tried instead")


# ---------------------------------------------------------------------------------------------
# Runs in


class RunIn(BaseModel):
    """One run reported by an agent: the envelope plus who ran what, where, and when.

    `status` is the envelope's: "ok" is stored as a succeeded run (zero results is the valid empty
    case), "error" as a failed run, which then needs a `failure_type`. Other run statuses
    (skipped, cancelled, escalated …) are the coordinator's to set, not an agent's to report: v1
    accepts the envelope's two, and a value can be added later without breaking clients. Unknown
    fields are refused (422) so that a misspelt field is not silently lost.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    status: Literal["ok", "error"]
    failure_type: FailureCategory | None = None
    retryable: bool | None = None
    retry_after: float | None = Field(None, ge=0, description="Seconds, when the provider said so")
    attempted: dict[str, Any] = Field(
        default_factory=dict, description="The exact operation/query attempted"
    )
    partial_results: list[Any] = Field(default_factory=list, description="Gathered before failing")
    alternatives: list[str] = Field(default_factory=list, description="What could be tried instead")
    detail: str = Field("", description="Human-readable error, kept verbatim")
    results: list[Any] = Field(default_factory=list, description="The results, when ok")

    agent: Name
    source: Name
    operation: Str200 = Field("", description="Defaults to attempted.operation")
    workflow: RunId | None = Field(None, description="Id of an existing workflow")
    topic: Str200 = ""
    capability: Str100 = ""
    attempt: int = Field(1, ge=1, le=INT_MAX)
    retry_of: RunId | None = Field(None, description="Id of the first attempt of the same task")
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: float | None = Field(None, ge=0)
    status_code: int | None = Field(
        None, ge=0, le=SMALLINT_MAX, description="HTTP or RPC status code"
    )
    provider_code: Str200 = ""
    exception_type: Str300 = ""
    chain: list[str] = Field(default_factory=list, description="Exception chain, outermost first")
    idempotency_key: Str255 = Field(
        "", description="Batch items only (single reports use the Idempotency-Key header)"
    )

    @field_validator("started_at", "finished_at")
    @classmethod
    def _naive_means_utc(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


class RunBatchIn(BaseModel):
    """Up to settings.API_MAX_BATCH runs (default 1,000).

    Items are deliberately not validated as a whole: each is validated on its own so that one bad
    item is rejected alone (its index says which) instead of failing the batch.
    """

    model_config = ConfigDict(extra="forbid")

    runs: list[Annotated[RunIn, SkipValidation]]


# ---------------------------------------------------------------------------------------------
# Runs out


class RunOut(Schema):
    id: int
    status: Run.Status = Field(description="queued, running, succeeded, failed, skipped, …")
    valid_empty: bool = Field(description="Succeeded with zero results: a success, not a failure")
    agent: str
    source: str
    operation: str
    workflow: int | None = Field(None, validation_alias="workflow_id")
    topic: str
    capability: str
    attempt: int
    retry_of: int | None = Field(None, validation_alias="retry_of_id")
    attempted: dict[str, Any]
    result_count: int
    results: list[Any]
    failure_type: FailureCategory | None
    retryable: bool | None
    retry_after: float | None
    status_code: int | None
    provider_code: str
    exception_type: str
    detail: str
    chain: list[Any] = Field(validation_alias="exception_chain")
    partial_results: list[Any]
    partial_count: int
    alternatives: list[Any]
    decision: str
    decision_reason: str
    policy_version: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: float | None
    idempotency_key: str

    @staticmethod
    def resolve_valid_empty(obj: Run) -> bool:
        return obj.is_valid_empty


class RunListOut(Schema):
    items: list[RunOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page")


class RunFilters(Schema):
    """Query filters of GET /runs; every one is optional and they combine with AND."""

    status: Run.Status | None = None
    failure_type: FailureCategory | None = None
    source: Annotated[str, NoNul] | None = Field(None, max_length=100)
    agent: Annotated[str, NoNul] | None = Field(None, max_length=100)
    topic: Annotated[str, NoNul] | None = Field(None, max_length=200)
    workflow: RunId | None = None
    since: datetime | None = Field(None, description="created_at ≥ since (ISO 8601)")
    until: datetime | None = Field(None, description="created_at < until (ISO 8601)")
    valid_empty: bool | None = Field(
        None, description="true: only succeeded runs with zero results; false: all but those"
    )
    set: RunSetName | None = Field(
        None,
        description="A named set of runs, counted the same way by the dashboard's tiles: "
        "failures, valid_empty, partial (failures with partial results), retries, "
        "wasted_retries, early_retries (before their Retry-After), switched, avoided_retries, "
        "retrying (queued retries), in_flight",
    )
    cursor: Annotated[str, NoNul] | None = Field(None, max_length=200)
    limit: int = Field(50, ge=1, le=500)

    @field_validator("since", "until")
    @classmethod
    def _naive_means_utc(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value


# ---------------------------------------------------------------------------------------------
# Batch results


class ItemErrorOut(Schema):
    failure_type: FailureCategory = FailureCategory.INVALID_INPUT
    detail: str
    errors: list[FieldErrorOut] = Field(default_factory=list)


class BatchItemOut(Schema):
    index: int
    status: Literal["created", "existing", "rejected"]
    id: int | None = None
    error: ItemErrorOut | None = None


class BatchResultOut(Schema):
    results: list[BatchItemOut]


# ---------------------------------------------------------------------------------------------
# Policies


class PolicyOut(Schema):
    failure_type: FailureCategory
    max_attempts: int
    base_delay: float
    max_delay: float
    multiplier: float
    jitter: str
    action_when_exhausted: str
    hard_fail: bool
    review_deadline: int
    review_fallback: str


class OverrideOut(Schema):
    provider: str
    match_on: str
    match_value: str
    failure_type: FailureCategory
    retryable: bool | None
    note: str
    enabled: bool


class PoliciesOut(Schema):
    version: int
    policies: list[PolicyOut]
    overrides: list[OverrideOut] = Field(description="Enabled provider overrides only")


# ---------------------------------------------------------------------------------------------
# Decisions, classification and workflows

Topic = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class DecisionIn(Schema):
    failure: dict[str, Any] = Field(description="An envelope or the output of /classify")
    attempt: int = Field(1, ge=1, le=1000, description="The attempt that just failed")
    source: Name
    workflow: int | None = Field(None, ge=1)


class DecisionOut(Schema):
    action: str
    delay_seconds: float
    reason: str
    policy_version: int


class ClassificationOut(Schema):
    failure_type: str
    category: str
    retryable: bool
    retry_after: float | None
    status_code: int | None
    provider_code: str | None
    exception_type: str
    signal: str
    chain: list[str]
    detail: str
    taxonomy_version: int


class WorkflowIn(Schema):
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    goal: Annotated[str, StringConstraints(max_length=2000)] = ""
    topics: list[Topic] = Field(min_length=1, max_length=100)
    capability: Name
    breadth: int = Field(1, ge=1, le=10)
    input: dict[str, Any] = Field(default_factory=dict, description="Passed to the sources")


class WorkflowOut(Schema):
    id: int
    name: str
    status: str
    topics: list[str]
    capability: str
    breadth: int
    coverage_summary: str
    created_at: datetime
    finished_at: datetime | None
    runs: dict[str, int]
    open_reviews: int


class CoverageOut(Schema):
    workflow: int
    status: str
    final: bool
    summary: str
    coverage: dict[str, Any]
