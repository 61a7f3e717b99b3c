"""The schemas of the runs routes, plain data. Input schemas are plain pydantic models, which
validate faster than ninja's `Schema` on the batch path (what happens to a report is
`orchestrator.ingest`'s); output schemas are ninja `Schema`s read from model rows."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import (
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SkipValidation,
    field_validator,
    model_validator,
)

from classifier import TAXONOMY_VERSION, FailureCategory, Signal
from classifier.envelope import field_names
from orchestrator.models import ENVELOPE_STATUSES, NAMED_SETS, Run
from orchestrator.schemas.common import (
    INT_MAX,
    SMALLINT_MAX,
    Duration,
    FailureTypeName,
    FieldErrorOut,
    Name,
    NoNul,
    RetryAfter,
    RunId,
    SpanId,
    Str100,
    Str200,
    Str255,
    Str300,
    TraceId,
    _other_names,
    fold_other_names,
    in_utc,
    report_time,
)
from orchestrator.schemas.shapes import fold_shapes
from orchestrator.schemas.usage import CostIn, CostOut, UsageIn, UsageOut, cost_out, usage_out

RunSetName = Enum("RunSetName", {name: name for name in NAMED_SETS}, type=str)
# A run status, or one of the envelope's two words for an outcome (ok, error).
RunStatusFilter = Enum(
    "RunStatusFilter", {v: v for v in [*Run.Status.values, *ENVELOPE_STATUSES]}, type=str
)


class EnvelopeIn(BaseModel):
    """A run's outcome as an agent reports it: the envelope (what `RunIn` and `RunFinishIn`
    share). Every field is also read under its camelCase form (`failureType`, `partialResults`
    …), `alternatives` also as `alternatives_suggested`, `retryable` as `retry_recommended` or
    MCP's `isRetryable`, `failure_type` as MCP's `errorCategory`, `detail` as `message`, and a
    bare `attempted_query` string as `attempted.query`; one field sent under two names is
    refused. Without `status`, a failure type says error and results say ok. An MCP tool result
    (`isError`, `content`, `structuredContent`, `_meta`, `code`) is read as the envelope it
    stands for. Other unknown fields are refused (422) so that a misspelt field is not silently
    lost.
    """

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        alias_generator=AliasGenerator(validation_alias=_other_names),
    )

    status: Literal["ok", "error"]
    failure_type: FailureTypeName | None = None
    retryable: bool | None = Field(
        None,
        description="false: a retry cannot help (never retried blindly); also read as "
        "retry_recommended",
    )
    retry_after: RetryAfter | None = Field(
        None, description="Seconds, when the provider said so (capped at a day)"
    )
    attempted: dict[str, Any] = Field(
        default_factory=dict,
        description="The exact operation/query attempted (a bare attempted_query string is read "
        "as attempted.query)",
    )
    partial_results: list[Any] = Field(default_factory=list, description="Gathered before failing")
    alternatives: list[str] = Field(
        default_factory=list,
        description="What could be tried instead (also read as alternatives_suggested); one "
        "naming a registered source is a switch target",
    )
    detail: str = Field("", description="Human-readable error, kept verbatim")
    results: list[Any] = Field(default_factory=list, description="The results, when ok")
    finished_at: datetime | None = None
    duration_ms: Duration | None = Field(
        None, description="Milliseconds the call took (at most the time window's width)"
    )
    status_code: int | None = Field(
        None, ge=0, le=SMALLINT_MAX, description="HTTP or RPC status code"
    )
    provider_code: Str200 | None = None
    exception_type: Str300 = ""
    signal: Signal | None = Field(None, description="Which evidence decided the failure type")
    chain: list[str] = Field(default_factory=list, description="Exception chain, outermost first")
    taxonomy_version: int | None = Field(
        None,
        ge=1,
        le=TAXONOMY_VERSION,
        description=f"The taxonomy the failure type is from; this server speaks {TAXONOMY_VERSION}",
    )
    classified_policy_version: int | None = Field(
        None,
        ge=1,
        le=INT_MAX,
        description="The policy version (X-Policy-Version) whose provider overrides classified "
        "this failure on the agent's side. Older than the server's, or absent, and the server "
        "classifies the described exception again with its current overrides",
    )
    usage: UsageIn | None = Field(
        None, description="Tokens used and the model (also read from OpenTelemetry GenAI spans)"
    )
    cost: CostIn | None = Field(
        None,
        description="What the run cost, if the agent knows; without it, runs with usage or of a "
        "priced source are priced from the price table at their start",
    )

    _sent_failure_type: str | None = PrivateAttr(None)

    @model_validator(mode="wrap")
    @classmethod
    def _read_other_names(cls, data: Any, handler: Any) -> EnvelopeIn:
        if not isinstance(data, dict):
            return handler(data)
        data = fold_other_names(cls, fold_shapes(cls, data))
        run = handler(data)
        sent = next((data[n] for n in field_names("failure_type") if n in data), None)
        if isinstance(sent, str) and run.failure_type is not None and sent != run.failure_type:
            run._sent_failure_type = sent  # an alias: stored canonical, kept as it was sent
        return run

    @property
    def reported_failure_type(self) -> str | None:
        """The failure type as the agent wrote it, when that differs from the canonical name."""
        # Not `self._sent_failure_type`: BaseModel.__getattr__ is slow, on every run ingested.
        return self.__pydantic_private__.get("_sent_failure_type")

    @reported_failure_type.setter
    def reported_failure_type(self, sent: str | None) -> None:
        self.__pydantic_private__["_sent_failure_type"] = sent

    _finished_in_window = field_validator("finished_at")(report_time)


class RunIn(EnvelopeIn):
    """One run reported by an agent: the envelope plus who ran what, where, and when.

    `status` is the envelope's: "ok" is stored as a succeeded run (zero results is the valid empty
    case), "error" as a failed run, which then needs a `failure_type`. "running" reports a run
    that has started (no outcome fields yet): it shows in the in-flight view with its age, and
    `PATCH /runs/{id}` finishes it once with its envelope. Other run statuses (skipped, cancelled,
    escalated …) are the coordinator's to set, not an agent's to report.

    The output of `classifier.envelope.error_envelope()` and `success_envelope()` is accepted as
    it is, under any of the envelope's other names (see `EnvelopeIn`).
    """

    status: Literal["ok", "error", "running"]
    agent: Name | None = Field(None, description="Defaults to the token's name")
    source: Name | None = Field(None, description='Defaults to attempted.source, else "unknown"')
    operation: Str200 = Field("", description="Defaults to attempted.operation")
    workflow: RunId | None = Field(None, description="Id of an existing workflow")
    topic: Str200 = ""
    capability: Str100 = ""
    attempt: int = Field(1, ge=1, le=INT_MAX)
    retry_of: RunId | None = Field(None, description="Id of the first attempt of the same task")
    started_at: datetime | None = None
    idempotency_key: Str255 = Field(
        "", description="Batch items only (single reports use the Idempotency-Key header)"
    )
    trace_id: TraceId = Field(
        "", description="The OpenTelemetry trace this run belongs to (32 hex digits)"
    )
    span_id: SpanId = Field(
        "", description="The span of this run in that trace (16 hex digits; needs trace_id)"
    )

    _started_in_window = field_validator("started_at")(report_time)


class RunFinishIn(EnvelopeIn):
    """The outcome of a run reported as `running` (`PATCH /runs/{id}`): the envelope, with the
    same names and aliases as a report. Sent again unchanged it returns the run; another outcome
    for a finished run is a 409."""


class RunBatchIn(BaseModel):
    """Up to settings.API_MAX_BATCH runs (default 1,000).

    Items are deliberately not validated as a whole: each is validated on its own so that one bad
    item is rejected alone (its index says which) instead of failing the batch.
    """

    model_config = ConfigDict(extra="forbid")

    runs: list[Annotated[RunIn, SkipValidation]]


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
    switched_from: int | None = Field(
        None,
        validation_alias="switched_from_id",
        description="The failed run this one was started in place of by a switch of source "
        "(null if none)",
    )
    attempted: dict[str, Any]
    result_count: int
    results: list[Any]
    failure_type: FailureCategory | None
    reported_failure_type: str | None = Field(
        description="The failure type as the agent sent it, when that differs from the stored "
        "one: an alias, or a type the server's current overrides replaced (null if not)"
    )
    classified_policy_version: int | None = Field(
        description="The policy version whose provider overrides classified the failure"
    )
    retryable: bool | None
    retry_after: float | None
    status_code: int | None
    provider_code: str | None
    exception_type: str
    signal: Signal | None = Field(description="Which evidence decided the failure type")
    detail: str
    chain: list[Any] = Field(validation_alias="exception_chain")
    taxonomy_version: int = Field(TAXONOMY_VERSION, description="The taxonomy failure_type is from")
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
    trace_id: str = Field(description="OpenTelemetry trace id (hex), empty if none")
    span_id: str = Field(description="OpenTelemetry span id (hex), empty if none")
    trace_url: str | None = Field(
        description="The trace in the operators' tracing tool (TRACE_URL_TEMPLATE), if set"
    )
    scrubbed_fields: int = Field(
        description="How many values of the report were secrets, stored as [Filtered]"
    )
    usage: UsageOut | None = Field(description="Tokens used and the model (null if not reported)")
    cost: CostOut | None = Field(
        description="What it cost, reported or priced (null if neither); the amount a decimal "
        "string"
    )

    @staticmethod
    def resolve_valid_empty(obj: Run) -> bool:
        return obj.is_valid_empty

    @staticmethod
    def resolve_provider_code(obj: Run) -> str | None:
        return obj.provider_code or None  # as the envelope writes "no code": null

    @staticmethod
    def resolve_signal(obj: Run) -> str | None:
        return obj.signal or None

    @staticmethod
    def resolve_taxonomy_version(obj: Run) -> int:
        return TAXONOMY_VERSION

    @staticmethod
    def resolve_usage(obj: Run) -> dict[str, Any] | None:
        return usage_out(obj)

    @staticmethod
    def resolve_cost(obj: Run) -> dict[str, Any] | None:
        return cost_out(obj)


class RunListOut(Schema):
    items: list[RunOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next (older) page")


class RunFilters(Schema):
    """Query filters of GET /runs; every one is optional and they combine with AND."""

    status: RunStatusFilter | None = Field(
        None,
        description="A run status, or the envelope's word: ok (succeeded), error (failed or "
        "escalated)",
    )
    failure_type: FailureTypeName | None = None
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
        "futile_retries (retried although they said a retry cannot help), retrying (queued "
        "retries), in_flight",
    )
    trace_id: TraceId | None = Field(None, description="Runs of one OpenTelemetry trace")
    cursor: Annotated[str, NoNul] | None = Field(None, max_length=200)
    limit: int = Field(50, ge=1, le=500)

    @field_validator("trace_id", mode="before")
    @classmethod
    def _empty_is_any(cls, value: Any) -> Any:
        return None if value == "" else value

    _in_utc = field_validator("since", "until")(in_utc)


class RunExportFilters(RunFilters):
    """GET /runs/export: the runs list's filters and the format; every matching run is sent."""

    format: Literal["csv", "jsonl"] = Field("csv", description="csv or jsonl (JSON Lines)")


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
