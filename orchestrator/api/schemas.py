"""Request and response schemas of the REST API v1, with explicit fields.

Input schemas are plain pydantic models (no ORM access needed, and they validate faster than ninja's
`Schema`, which matters on the batch path); output schemas are ninja `Schema`s read from model rows.
String limits match the model columns, integer limits match the column types (PostgreSQL `integer`,
`smallint`, `bigint`), so nothing valid here can overflow or be truncated in the database.

Every failure type arriving as text is read by `FailureTypeName`, the classifier's one parser
(canonical names and their aliases; anything else is a 422 naming the valid values), and a run's
fields are also read under the names other envelope conventions use (`classifier.envelope`'s
aliases and camelCase forms); unknown keys are still refused.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import (
    AliasChoices,
    AliasGenerator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SkipValidation,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from classifier import TAXONOMY_VERSION, FailureCategory, Signal
from classifier.envelope import ATTEMPTED_QUERY, field_names
from classifier.taxonomy import ALIASES, UnknownFailureType, parse_failure_type
from orchestrator.models import ENVELOPE_STATUSES, NAMED_SETS, ReviewItem, Run
from orchestrator.vocabulary import Action, Coordinator

RunSetName = Enum("RunSetName", {name: name for name in NAMED_SETS}, type=str)
# A run status, or one of the envelope's two words for an outcome (ok, error).
RunStatusFilter = Enum(
    "RunStatusFilter", {v: v for v in [*Run.Status.values, *ENVELOPE_STATUSES]}, type=str
)
INT_MAX = 2**31 - 1  # PostgreSQL integer (attempt, result counts)
SMALLINT_MAX = 2**15 - 1  # PostgreSQL smallint (status_code)
BIGINT_MAX = 2**63 - 1  # PostgreSQL bigint (primary keys)

RunId = Annotated[int, Field(ge=1, le=BIGINT_MAX)]
NoNul = StringConstraints(pattern=r"^[^\x00]*$")


def in_utc(value: datetime | None) -> datetime | None:
    """A time in UTC (naive means UTC); refused unless it lies within years 1 to 9999 in UTC.

    PostgreSQL would store "0001-01-01T00:00:00+14:00" (a time in year 0 UTC), which Python
    cannot read back: every list and page showing it would fail. It never gets that far.
    """
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("must lie within the years 1 to 9999 in UTC") from None


Name = Annotated[str, StringConstraints(min_length=1, max_length=100)]
Str100 = Annotated[str, StringConstraints(max_length=100)]
Str200 = Annotated[str, StringConstraints(max_length=200)]
Str255 = Annotated[str, StringConstraints(max_length=255)]
Str300 = Annotated[str, StringConstraints(max_length=300)]


def _hex_id(size: int) -> Any:
    """An OpenTelemetry id: `size` hex digits, not all zero (the invalid id); read lowercase."""

    def read(value: Any) -> Any:
        if not isinstance(value, str) or value == "":  # "" is no id, as the column stores it
            return value
        value = value.lower()
        if len(value) != size or value.strip("0123456789abcdef") or not value.strip("0"):
            raise PydanticCustomError(
                "otel_id", f"{size} hexadecimal digits, not all zero (an OpenTelemetry id)"
            )
        return value

    return BeforeValidator(read)


TraceId = Annotated[
    str, _hex_id(32), WithJsonSchema({"type": "string", "pattern": "^[0-9a-f]{32}$"})
]
SpanId = Annotated[
    str, _hex_id(16), WithJsonSchema({"type": "string", "pattern": "^[0-9a-f]{16}$"})
]


def _failure_type(value: Any) -> FailureCategory:
    try:
        return parse_failure_type(value)
    except UnknownFailureType as exc:
        raise PydanticCustomError("failure_type", str(exc)) from None


# A failure type as any client writes it: one of the eight names, or an alias ("auth_error").
FailureTypeName = Annotated[
    FailureCategory,
    BeforeValidator(_failure_type),
    WithJsonSchema(
        {
            "type": "string",
            "description": "One of the taxonomy's eight names, or an alias of one from another "
            "vocabulary (README: 'Failure types and their aliases'); stored under the "
            f"canonical name. Canonical: {', '.join(FailureCategory)}. Aliases: "
            + ", ".join(f"{alias} → {category}" for alias, category in ALIASES.items()),
            "examples": ["timeout", "auth_error", "rate_limit"],
        }
    ),
]


def _other_names(name: str) -> AliasChoices:
    """Every name a field is read under: itself first (the documented one), then the rest."""
    return AliasChoices(*field_names(name))


def _error(kind: str, message: str, key: str, value: Any) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError(kind, message), loc=(key,), input=value)


def _duplicates(model: type[BaseModel], data: dict[str, Any]) -> list[InitErrorDetails]:
    """One error per field given under two of its names (a silent pick would lose a value)."""
    groups = [
        alias.choices if isinstance(alias, AliasChoices) else ()
        for alias in (field.validation_alias for field in model.model_fields.values())
    ]
    groups.append(field_names(ATTEMPTED_QUERY))
    errors = []
    for names in groups:
        given = [name for name in names if isinstance(name, str) and name in data]
        for other in given[1:]:
            message = f"{given[0]} and this key name the same field: send one"
            errors.append(_error("duplicate_field", message, other, data[other]))
    return errors


def _fold_query(data: dict[str, Any]) -> tuple[dict[str, Any], list[InitErrorDetails]]:
    """Fold a bare attempted_query into attempted ({"query": …}), or say why it cannot be."""
    key = next((name for name in field_names(ATTEMPTED_QUERY) if name in data), None)
    if key is None:
        return data, []
    query = data[key]
    attempted_key = next((n for n in field_names("attempted") if n in data), "attempted")
    attempted = data.get(attempted_key, {})
    if not isinstance(query, str):
        return data, [_error("string_type", "a query string, read as attempted.query", key, query)]
    if not isinstance(attempted, dict):
        return data, []  # `attempted` itself is refused for its type
    if attempted.get("query", query) != query:
        message = f"differs from {attempted_key}.query: send the query once"
        return data, [_error("conflict", message, key, query)]
    folded = {k: v for k, v in data.items() if k != key}
    folded[attempted_key] = {"query": query} | attempted
    return folded, []


def fold_other_names(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """Return `data` ready for `model`: a bare attempted_query folded into `attempted`.

    Raise a ValidationError when one field is given under two of its names, or when the query
    differs from attempted's own.
    """
    errors = _duplicates(model, data)
    if not errors:
        data, errors = _fold_query(data)
    if errors:
        raise ValidationError.from_exception_data(model.__name__, errors)
    return data


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


class EnvelopeIn(BaseModel):
    """A run's outcome as an agent reports it: the envelope (what `RunIn` and `RunFinishIn`
    share). Every field is also read under its camelCase form (`failureType`, `partialResults`
    …), `alternatives` also as `alternatives_suggested`, `retryable` as `retry_recommended`, and
    a bare `attempted_query` string as `attempted.query`; one field sent under two names is
    refused. Unknown fields are refused (422) so that a misspelt field is not silently lost.
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
    retry_after: float | None = Field(None, ge=0, description="Seconds, when the provider said so")
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
    duration_ms: float | None = Field(None, ge=0)
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

    _sent_failure_type: str | None = PrivateAttr(None)

    @model_validator(mode="wrap")
    @classmethod
    def _read_other_names(cls, data: Any, handler: Any) -> EnvelopeIn:
        if not isinstance(data, dict):
            return handler(data)
        data = fold_other_names(cls, data)
        run = handler(data)
        sent = next((data[n] for n in field_names("failure_type") if n in data), None)
        if isinstance(sent, str) and run.failure_type is not None and sent != run.failure_type:
            run._sent_failure_type = sent  # an alias: stored canonical, kept as it was sent
        return run

    @property
    def reported_failure_type(self) -> str | None:
        """The failure type as the agent wrote it, when that differs from the canonical name."""
        return self._sent_failure_type

    _finished_in_utc = field_validator("finished_at")(in_utc)

    def envelope(self) -> dict[str, Any]:
        """The outcome as `Run.outcome_fields` reads it."""
        return {
            "status": self.status,
            "failure_type": self.failure_type.value if self.failure_type else None,
            "retryable": self.retryable,
            "retry_after": self.retry_after,
            "attempted": self.attempted,
            "partial_results": self.partial_results,
            "alternatives": self.alternatives,
            "detail": self.detail,
            "results": self.results,
            "status_code": self.status_code,
            "provider_code": self.provider_code,
            "exception_type": self.exception_type,
            "signal": self.signal.value if self.signal else "",
            "chain": self.chain,
        }


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
    agent: Name
    source: Name
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

    _started_in_utc = field_validator("started_at")(in_utc)


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
    reported_failure_type: str | None = Field(
        description="The failure type as the agent sent it, when that was an alias (null if not)"
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


class PolicyRowIn(Schema):
    """One failure type's proposed row: the fields given replace the current row's."""

    model_config = ConfigDict(extra="forbid")

    failure_type: FailureCategory
    max_attempts: int | None = None
    base_delay: float | None = None
    max_delay: float | None = None
    multiplier: float | None = None
    jitter: Literal["full", "equal", "none"] | None = None
    action_when_exhausted: Action | None = None
    hard_fail: bool | None = None
    review_deadline: int | None = None
    review_fallback: Action | None = None

    def given(self) -> dict[str, Any]:
        row = self.model_dump(exclude_none=True, mode="json")
        return row


class DryRunIn(Schema):
    model_config = ConfigDict(extra="forbid")

    days: float = Field(7, gt=0, le=90, description="Days of stored failures to replay")
    policies: list[PolicyRowIn] = Field(
        default_factory=list, max_length=20, description="Rows over the current table"
    )


class FiguresOut(Schema):
    failures: float
    retries: float
    waiting_seconds: float = Field(description="Expected seconds spent waiting before retries")
    switches: float
    escalations: float
    escalations_per_day: float = Field(description="Review load: escalations per day")
    aborts: float
    accepted_partial: float
    expected_wasted_calls: float = Field(
        description="Retries and switches expected to fail, from what followed recorded ones"
    )
    expected_recovered: float = Field(description="Runs expected to succeed after the decision")
    by_failure_type: dict[str, dict[str, float]]


class DryRunOut(Schema):
    since: datetime
    until: datetime
    days: float
    failures: int = Field(description="Failures in the window")
    sampled: bool = Field(description="True when a sample was replayed and the figures scaled")
    sample_size: int
    evidence: dict[str, int] = Field(description="Recorded retries and switches behind the rates")
    current_version: int
    current: FiguresOut
    proposed: FiguresOut
    difference: dict[str, float] = Field(description="Proposed minus current")


class PolicyChangeOut(Schema):
    what: str
    before: Any = None
    after: Any = None


class PolicyVersionOut(Schema):
    version: int
    created_at: datetime
    actor: str
    note: str
    restored_from: int | None
    policies: list[PolicyOut]
    overrides: list[OverrideOut] = Field(description="Every override of the version")
    changes: list[PolicyChangeOut] = Field(description="What differs from the version before")


class PolicyVersionListOut(Schema):
    items: list[PolicyVersionOut]
    next_before: int | None = Field(description="Pass as `before` for the older versions")


# ---------------------------------------------------------------------------------------------
# Decisions, classification and workflows

Topic = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class FailureIn(BaseModel):
    """The failure a decision is about: an envelope (any name `RunIn` reads), a run as
    `GET /runs/{id}` returns it, or the output of `/classify`.

    Only what routing reads is validated; other keys are ignored, so a whole envelope or run can
    be sent. `failure_type` (or `category`, /classify's name for it) is required and read like
    every failure type: an unknown name is a 422, never routed as unclassified.
    """

    model_config = ConfigDict(
        extra="ignore",
        allow_inf_nan=False,
        alias_generator=AliasGenerator(validation_alias=_other_names),
    )

    failure_type: FailureTypeName = Field(description="Also read as `category`")
    retryable: bool | None = Field(
        None, description="false: a retry cannot help, so the decision is never a blind retry"
    )
    retry_after: float | None = Field(None, ge=0, description="Seconds the provider asked for")
    status_code: int | None = Field(None, ge=0, le=SMALLINT_MAX)
    partial_results: list[Any] = Field(default_factory=list)
    alternatives: list[Any] = Field(
        default_factory=list,
        description="An alternative naming a registered source is a switch "
        "target when the capability has no other source left",
    )
    detail: str = ""
    signal: str | None = Field(None, description="Set by the classifier: the provider spoke")

    _retryable_by: str = PrivateAttr("the agent")

    @model_validator(mode="wrap")
    @classmethod
    def _read_other_names(cls, data: Any, handler: Any) -> FailureIn:
        if not isinstance(data, dict):
            return handler(data)
        data = _category_as_failure_type(fold_other_names(cls, data))
        failure = handler(data)
        if any(name in data for name in field_names("retryable")[1:]):
            failure._retryable_by = "the agent"  # retry_recommended: the agent's own advice
        elif failure.signal not in (None, "", Signal.NONE):
            failure._retryable_by = "the provider"  # the classifier read it from the provider
        return failure

    def facts(self) -> dict[str, Any]:
        """What routing reads, with who said whether a retry can help."""
        return {
            "failure_type": self.failure_type,
            "retryable": self.retryable,
            "retryable_by": self._retryable_by,
            "retry_after": self.retry_after,
            "status_code": self.status_code,
            "detail": self.detail,
        }

    def suggested_sources(self) -> list[str]:
        return [a for a in self.alternatives if isinstance(a, str)]


def _category_as_failure_type(data: dict[str, Any]) -> dict[str, Any]:
    """Read /classify's `category` as the failure type; refuse it beside a different one."""
    if "category" not in data:
        return data
    data = dict(data)
    category = data.pop("category")
    named = next((n for n in field_names("failure_type") if n in data), None)
    if named is None:
        return data | {"failure_type": category}
    try:
        same = parse_failure_type(category) == parse_failure_type(data[named])
    except UnknownFailureType:
        same = False
    if not same:
        message = f"category and {named} disagree: send one failure type"
        error = _error("conflict", message, "category", category)
        raise ValidationError.from_exception_data(FailureIn.__name__, [error])
    return data


class DecisionIn(Schema):
    """What to decide about. With `run` (the id of a failed run an agent reported) the decision
    is about that run's stored failure and is recorded on it; `failure` and `source` may then be
    left out (a `failure` sent anyway must name the run's failure type). Without `run`, the
    decision is only answered: `failure` and `source` are required."""

    failure: FailureIn | None = Field(
        None, description="An envelope, a run, or the output of /classify"
    )
    attempt: int = Field(1, ge=1, le=1000, description="The attempt that just failed")
    source: Name | None = None
    run: RunId | None = Field(
        None, description="A failed run: the decision is stored on it, once (asked again: the same)"
    )
    workflow: int | None = Field(None, ge=1, description="A workflow of the built-in coordinator")
    topic: Str200 = Field("", description="With `workflow`: the sources its runs tried are skipped")
    tried: list[Name] = Field(
        default_factory=list,
        max_length=100,
        description="Sources this task already tried: never proposed as `switch_to`",
    )

    @model_validator(mode="after")
    def _about_something(self) -> DecisionIn:
        if self.run is None and (self.failure is None or self.source is None):
            raise PydanticCustomError(
                "missing", "failure and source are required unless run names a reported run"
            )
        return self


class ReviewRefOut(Schema):
    id: int
    url: str = Field(description="The item's page on the dashboard (/review/<id>/)")


class DecisionOut(Schema):
    action: Action
    delay_seconds: float
    reason: str
    policy_version: int
    refresh: bool = Field(
        False, description="retry only: refresh the credentials first (an auth failure's one retry)"
    )
    switch_to: str | None = Field(
        None, description="switch_source only: the source to try next, when one is known"
    )
    run: int | None = Field(None, description="The run the decision is recorded on, if any")
    budget_spent: float = Field(0.0, description="Retry-budget tokens this decision took")
    decided_at: datetime | None = Field(None, description="When the recorded decision was taken")
    review: ReviewRefOut | None = Field(
        None, description="escalate with a run: the review item it opened (or that is open)"
    )


class DescribedErrorIn(BaseModel):
    """An error described as data: what an exception would have told the classifier.

    Every key is optional; the same rules, provider overrides and precedence apply as for a real
    exception. `cause` and `context` describe the exceptions it wraps, in the same shape.
    """

    model_config = ConfigDict(
        extra="forbid",
        allow_inf_nan=False,
        alias_generator=AliasGenerator(validation_alias=_other_names),
    )

    exception_type: Str300 | None = Field(
        None,
        description="'module.ClassName'; a builtin name resolves to the real class, so "
        "'ConnectionResetError' counts as a ConnectionError",
        examples=["httpx.ReadTimeout"],
    )
    message: str | None = Field(None, examples=["read timed out"])
    status_code: int | None = Field(None, ge=0, le=SMALLINT_MAX, examples=[504])
    headers: dict[str, Any] | list[Any] | None = Field(
        None,
        description="Response headers: Retry-After, retry-after-ms, x-ratelimit-reset-*, "
        "x-should-retry …",
        examples=[{"Retry-After": "3"}],
    )
    provider_code: Str200 | None = Field(
        None, description="A provider's own error code", examples=["ThrottlingException"]
    )
    error_code: Str200 | None = Field(None, description="Read like provider_code")
    grpc_status: Str100 | None = Field(None, examples=["UNAVAILABLE"])
    sqlstate: Str100 | None = Field(None, examples=["40001"])
    retryable: bool | None = Field(None, description="The error's own say, if it has one")
    retry_after: float | None = Field(None, ge=0, description="Seconds, if the error says")
    failure_type: FailureTypeName | None = Field(
        None,
        description="The describer's own category (an alias works); decides unless a provider "
        "override matched",
    )
    cause: DescribedErrorIn | None = None
    context: DescribedErrorIn | None = None

    @model_validator(mode="before")
    @classmethod
    def _one_name_per_field(cls, data: Any) -> Any:
        return fold_other_names(cls, data) if isinstance(data, dict) else data


def _mcp(name: str) -> AliasChoices:
    """An MCP field's names, camelCase first (the protocol's own spelling, as documented)."""
    return AliasChoices(*reversed(field_names(name)))


class ClassifyIn(DescribedErrorIn):
    """A described error, or an MCP tool result whose `isError` is true.

    An MCP result is recognised by `isError` (or `is_error`): its text content is the message,
    and `errorCategory` (a failure type name, aliases included), `isRetryable`, `retryAfter`,
    `code`/`status` and `message` are read at the top level, in `_meta`, in `structuredContent`
    and in `structuredContent.error`, each in camelCase or snake_case.
    """

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "exception_type": "ToolError",
                    "message": "search failed",
                    "cause": {
                        "exception_type": "httpx.HTTPStatusError",
                        "status_code": 429,
                        "headers": {"Retry-After": "3"},
                    },
                },
                {
                    "isError": True,
                    "content": [{"type": "text", "text": "token expired"}],
                    "structuredContent": {"errorCategory": "auth_error", "isRetryable": False},
                },
            ]
        }
    )

    provider: Name | None = Field(
        None, description="The source or provider, so that overrides scoped to it apply too"
    )
    is_error: bool | None = Field(
        None, validation_alias=_mcp("is_error"), description="MCP: true marks a failed tool call"
    )
    content: list[dict[str, Any]] | None = Field(
        None, description="MCP: content items; the text ones are the message"
    )
    structured_content: dict[str, Any] | None = Field(
        None,
        validation_alias=_mcp("structured_content"),
        description="MCP: may hold errorCategory, isRetryable, retryAfter, code, error {…}",
    )
    meta: dict[str, Any] | None = Field(
        None, validation_alias="_meta", description="MCP: _meta, read like structuredContent"
    )
    error_category: FailureTypeName | None = Field(
        None,
        validation_alias=_mcp("error_category"),
        description="MCP: the tool's own failure type (an alias works)",
    )
    is_retryable: bool | None = Field(
        None, validation_alias=_mcp("is_retryable"), description="MCP: the tool's own retry say"
    )
    code: int | str | None = Field(None, description="MCP: a status code or a provider code")


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
    coordinator: Coordinator = Field(
        Coordinator.BUILT_IN,
        description="built_in: this product's coordinator fans out over `capability`'s "
        "registered sources and steps the workflow; external: your own coordinator reports the "
        "runs (with this workflow's id and a topic) and calls POST /workflows/{id}/finish",
    )
    capability: Str100 = Field("", description="Required for built_in; optional for external")
    breadth: int = Field(1, ge=1, le=10)
    input: dict[str, Any] = Field(default_factory=dict, description="Passed to the sources")


class WorkflowOut(Schema):
    id: int
    name: str
    status: str
    coordinator: Coordinator
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


# ---------------------------------------------------------------------------------------------
# Review items and their resolutions


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
