"""The schemas of decisions and classification."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Schema
from pydantic import (
    AliasChoices,
    AliasGenerator,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from classifier import Signal
from classifier.envelope import field_names
from classifier.taxonomy import UnknownFailureType, parse_failure_type
from orchestrator.schemas.common import (
    SMALLINT_MAX,
    FailureTypeName,
    Name,
    RetryAfter,
    RunId,
    Str100,
    Str200,
    Str300,
    _error,
    _other_names,
    fold_other_names,
)
from orchestrator.schemas.shapes import fold_mcp_result
from orchestrator.vocabulary import Action


class FailureIn(BaseModel):
    """The failure a decision is about: an envelope (any name `RunIn` reads), a run as
    `GET /runs/{id}` returns it, the output of `/classify`, or an MCP tool result (its
    `errorCategory`, `isRetryable`, `retryAfter` and `code`, nested or not; one naming no
    category is classified from what it says).

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
    retry_after: RetryAfter | None = Field(
        None, description="Seconds the provider asked for (capped at a day)"
    )
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
        data = _category_as_failure_type(fold_other_names(cls, fold_mcp_result(cls, data)))
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
    alternatives: list[Name] = Field(
        default_factory=list,
        max_length=100,
        description="Sources this agent can switch to, its own whether or not registered here "
        "(else the failure's `alternatives` that are bare names): answered back in `alternatives` "
        "ranked by switch efficacy as the built-in coordinator ranks its own; the best untried "
        "one is `switch_to` (the failure's are tried after the capability's registered ones)",
    )

    can_refresh: bool = Field(
        False,
        description="The agent can refresh its own credentials: an auth failure is then "
        "answered `retry` with `refresh: true` (refresh, then retry once) when the policy says so",
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
    escalate: bool = Field(
        False,
        description="switch_source only: the policy says switch and escalate; the work goes on "
        "on `switch_to` while a review item (`review`, with `run`) asks a person to repair the "
        "failing source. Nothing waits for it.",
    )
    run: int | None = Field(None, description="The run the decision is recorded on, if any")
    alternatives: list[str] = Field(
        default_factory=list,
        description="The agent's own alternatives, untried, best first by how often a switch "
        "from this source to each worked (for this failure type when known); as named when "
        "too few switches are known",
    )
    budget_spent: float = Field(0.0, description="Retry-budget tokens this decision took")
    decided_at: datetime | None = Field(None, description="When the recorded decision was taken")
    review: ReviewRefOut | None = Field(
        None,
        description="escalate with a run: the review item it opened (or that is open); "
        "switch_source with escalate: the repair item",
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
        description="Response headers: Retry-After, retry-after-ms, RateLimit-Reset, the IETF "
        "RateLimit field, x-ratelimit-reset-*, x-should-retry …",
        examples=[{"Retry-After": "3"}],
    )
    body: dict[str, Any] | str | None = Field(
        None,
        description="The response body (JSON, or its text): a `retry_after` / `retryAfter` "
        "(seconds) or `retry_after_ms` in it, at the top or under `error`, or a google.rpc "
        "RetryInfo among `error.details`, says how long to wait when no header does",
        examples=[{"retry_after": 30}],
    )
    provider_code: Str200 | None = Field(
        None, description="A provider's own error code", examples=["ThrottlingException"]
    )
    error_code: Str200 | None = Field(None, description="Read like provider_code")
    grpc_status: Str100 | None = Field(None, examples=["UNAVAILABLE"])
    sqlstate: Str100 | None = Field(None, examples=["40001"])
    retryable: bool | None = Field(None, description="The error's own say, if it has one")
    retry_after: RetryAfter | None = Field(
        None, description="Seconds, if the error says (capped at a day)"
    )
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
    result_type: str | None = Field(
        None,
        validation_alias=_mcp("result_type"),
        description='MCP: the result\'s kind ("complete"), as SDKs dump a result; not read',
    )


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
