"""The fixed vocabulary of a classification: the failure categories (taxonomy version 1), the
names other vocabularies give them, and the kinds of evidence that can decide a category."""

from __future__ import annotations

import re
from enum import StrEnum
from types import MappingProxyType
from typing import Final

TAXONOMY_VERSION = 1


class FailureCategory(StrEnum):
    """What kind of failure happened."""

    TRANSIENT = "transient"  # a blip that the same request soon survives unchanged
    RATE_LIMITED = "rate_limited"  # the provider asked us to slow down (not a spent quota)
    AUTH_FAILURE = "auth_failure"  # no retry helps until the credentials change
    RESOURCE_MISSING = "resource_missing"  # the target does not exist: switch source
    INVALID_INPUT = "invalid_input"  # the request itself is wrong: fix the payload
    TIMEOUT = "timeout"  # a deadline passed: fewer retries, longer backoff
    SERVER_FAULT = "server_fault"  # the remote side broke: retry with backoff
    UNCLASSIFIED = "unclassified"  # no reliable signal: retry at most once, then ask a human


class Signal(StrEnum):
    """Which kind of evidence decided the category, strongest first."""

    STATUS = "status"
    PROVIDER_CODE = "provider_code"  # also a SQLSTATE or a protocol's reply code
    TYPE = "type"
    MESSAGE = "message"
    NONE = "none"


# Names other vocabularies give the eight categories. Sources: names agent frameworks commonly
# use, the Anthropic and OpenAI APIs' `error.type` values, gRPC status names, HTTP reason phrases.
_ALIASES_BY_CATEGORY: Final = {
    FailureCategory.AUTH_FAILURE: (
        "auth_error",
        "auth",
        "authentication",
        "authentication_error",
        "authentication_failed",
        "unauthenticated",
        "unauthorized",
        "permission",
        "permission_denied",
        "permission_error",
        "forbidden",
        "access_denied",
        "expired_token",
        "invalid_credentials",
    ),
    FailureCategory.RATE_LIMITED: (
        "rate_limit",
        "rate_limit_error",
        "rate_limit_exceeded",
        "ratelimited",
        "throttled",
        "throttling",
        "too_many_requests",
        "resource_exhausted",
    ),
    FailureCategory.RESOURCE_MISSING: (
        "not_found",
        "not_found_error",
        "missing",
        "permanent",
        "gone",
        "no_such_resource",
    ),
    FailureCategory.INVALID_INPUT: (
        "validation",
        "validation_error",
        "bad_request",
        "invalid_request",
        "invalid_request_error",
        "invalid_argument",
        "schema",
        "schema_error",
        "unprocessable_entity",
        # MCP's errorCategory "business": a domain rule refused this request; no retry changes it
        "business",
        "business_error",
        "business_rule",
    ),
    FailureCategory.TRANSIENT: (
        "network",
        "network_error",
        "connection",
        "connection_error",
        "temporary",
    ),
    FailureCategory.TIMEOUT: (
        "deadline_exceeded",
        "timed_out",
        "timeout_error",
        "request_timeout",
    ),
    FailureCategory.SERVER_FAULT: (
        "server_error",
        "internal",
        "internal_error",
        "internal_server_error",
        "api_error",
        "unavailable",
        "service_unavailable",
        "bad_gateway",
        "overloaded",
        "overloaded_error",
    ),
    FailureCategory.UNCLASSIFIED: ("unknown", "other"),
}

ALIASES: Final = MappingProxyType(
    {alias: category for category, names in _ALIASES_BY_CATEGORY.items() for alias in names}
)

MAX_NAME_LENGTH: Final = 50

_CAMEL_BOUNDARY: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS: Final = re.compile(r"[\s\-.]+")


class UnknownFailureType(ValueError):
    def __init__(self, value: object) -> None:
        self.value = value
        shown = repr(value) if len(repr(value)) <= MAX_NAME_LENGTH + 2 else "that value"
        super().__init__(
            f"{shown} is not a failure type: use one of {', '.join(FailureCategory)} "
            "(or one of their aliases, such as auth_error or rate_limit)"
        )


def normalise_name(value: str) -> str:
    """Return a failure type name in the taxonomy's spelling ("authError" -> "auth_error")."""
    name = _CAMEL_BOUNDARY.sub("_", value.strip())
    return _SEPARATORS.sub("_", name).lower()


def parse_failure_type(value: object) -> FailureCategory:
    """Return the category a failure type name means, canonical or an alias (see ALIASES).

    Raise UnknownFailureType for anything else: names are refused, never guessed.
    """
    if isinstance(value, FailureCategory):
        return value
    if not isinstance(value, str) or len(value) > MAX_NAME_LENGTH:
        raise UnknownFailureType(value)
    name = normalise_name(value)
    try:
        return FailureCategory(name)
    except ValueError:
        pass
    category = ALIASES.get(name)
    if category is None:
        raise UnknownFailureType(value)
    return category
