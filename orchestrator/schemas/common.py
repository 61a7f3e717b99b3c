"""What every schema of the REST API v1 shares: constrained types, name folding, the error envelope.
Limits match the model columns and types, so nothing valid here overflows or is truncated in the
database."""

from __future__ import annotations

import functools
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    Field,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from classifier import FailureCategory
from classifier.envelope import ATTEMPTED_QUERY, field_names
from classifier.retry_after import MAX_RETRY_AFTER
from classifier.taxonomy import ALIASES, UnknownFailureType, parse_failure_type

INT_MAX = 2**31 - 1  # PostgreSQL integer (attempt, result counts)
SMALLINT_MAX = 2**15 - 1  # PostgreSQL smallint (status_code)
BIGINT_MAX = 2**63 - 1  # PostgreSQL bigint (primary keys)

RunId = Annotated[int, Field(ge=1, le=BIGINT_MAX)]
# A provider's wait in seconds, capped at a day as the classifier caps a Retry-After header: a
# wait is added to the current time, and a finite but astronomic one would overflow it.
RetryAfter = Annotated[float, Field(ge=0), AfterValidator(lambda s: min(s, MAX_RETRY_AFTER))]
NoNul = StringConstraints(pattern=r"^[^\x00]*$")


def in_utc(value: datetime | None) -> datetime | None:
    """A time in UTC (naive means UTC), within years 1 to 9999 in UTC: PostgreSQL would store a
    time in year 0 UTC, which Python cannot read back."""
    if value is None:
        return None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("must lie within the years 1 to 9999 in UTC") from None


# The one bound on what a report says about time (docs/api.md, "Times and durations"): every
# time lies within REPORT_TIME_PAST before and REPORT_TIME_AHEAD after the server's clock (an
# agent's clock may run a little fast), and every duration is one such window wide at most, the
# longest span between two times it admits. Beyond that a time is a bug or a placeholder
# (9999-12-31), and storing it would skew every window, age and cost computed from it.
REPORT_TIME_PAST = timedelta(days=3650)
REPORT_TIME_AHEAD = timedelta(days=1)
MAX_DURATION_MS = (REPORT_TIME_PAST + REPORT_TIME_AHEAD).total_seconds() * 1000


def report_time(value: datetime | None) -> datetime | None:
    """A reported time in UTC (`in_utc`), refused outside the window around the server's clock."""
    value = in_utc(value)
    if value is None:
        return None
    now = datetime.now(UTC)
    if not now - REPORT_TIME_PAST <= value <= now + REPORT_TIME_AHEAD:
        raise ValueError(
            f"must lie within {REPORT_TIME_PAST.days} days before and "
            f"{REPORT_TIME_AHEAD.days} day after the server's clock"
        )
    return value


Duration = Annotated[float, Field(ge=0, le=MAX_DURATION_MS)]


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
            "vocabulary (docs/api.md: 'Failure types and their aliases'); stored under the "
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


@functools.cache
def _name_groups(model: type[BaseModel]) -> dict[str, tuple[int, tuple[str, ...]]]:
    """{name: (its field's position, all of that field's names)}, once per model."""
    groups = [
        alias.choices if isinstance(alias, AliasChoices) else ()
        for alias in (field.validation_alias for field in model.model_fields.values())
    ]
    groups.append(field_names(ATTEMPTED_QUERY))
    return {
        name: (position, names)
        for position, names in enumerate(groups)
        for name in names
        if isinstance(name, str) and len(names) > 1
    }


def _duplicates(model: type[BaseModel], data: dict[str, Any]) -> list[InitErrorDetails]:
    """One error per field given under two of its names (a silent pick would lose a value)."""
    groups = _name_groups(model)
    given: dict[int, list[str]] = {}
    for key in data:
        if key in groups:
            given.setdefault(groups[key][0], []).append(key)
    errors = []
    for position in sorted(p for p, keys in given.items() if len(keys) > 1):
        names = next(names for p, names in groups.values() if p == position)
        keys = sorted(given[position], key=names.index)
        for other in keys[1:]:
            message = f"{keys[0]} and this key name the same field: send one"
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


@functools.cache
def _other_keys(model: type[BaseModel]) -> frozenset[str]:
    """The names `model` reads besides its fields' own (aliases, camelCase forms …)."""
    return frozenset(_name_groups(model)) - frozenset(model.model_fields)


def fold_other_names(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """Return `data` ready for `model`; a ValidationError when one field is given under two of
    its names."""
    if data.keys().isdisjoint(_other_keys(model)):
        return data
    errors = _duplicates(model, data)
    if not errors:
        data, errors = _fold_query(data)
    if errors:
        raise ValidationError.from_exception_data(model.__name__, errors)
    return data


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
