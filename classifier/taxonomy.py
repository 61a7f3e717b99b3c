"""The fixed vocabulary of a classification: the failure categories (taxonomy version 1), the
names other vocabularies give them (`ALIASES`, read by `parse_failure_type`, the one parser of a
failure type wherever one arrives as text), and the kinds of evidence (signals) that can decide a
category. Values are the JSON strings of the envelope. Only names and their meaning live here;
which evidence maps to which category is in `classifier.rules`, and whether a category is
retryable by default is `rules.DEFAULT_RETRYABLE`.
"""

from __future__ import annotations

import re
from enum import StrEnum
from types import MappingProxyType
from typing import Final

TAXONOMY_VERSION = 1


class FailureCategory(StrEnum):
    """What kind of failure happened; each member says when to choose it over its neighbours."""

    # A temporary infrastructure blip (connection reset/refused, DNS hiccup): choose this when the
    # same request should work soon unchanged; not for an explicit timeout (TIMEOUT) or a 5xx.
    TRANSIENT = "transient"
    # The provider throttled us (429, Throttling, SlowDown): choose this when the provider asked us
    # to slow down, usually with a delay; not for quota that will never refill (AUTH/INVALID).
    RATE_LIMITED = "rate_limited"
    # Credentials missing, expired or insufficient (401, 403): retrying the same call cannot help
    # until the credentials change; not for a missing object (RESOURCE_MISSING).
    AUTH_FAILURE = "auth_failure"
    # The target does not exist (404, 410, NoSuchKey): switch source or record a gap; not for a
    # malformed request that names nothing (INVALID_INPUT).
    RESOURCE_MISSING = "resource_missing"
    # The request itself is wrong (400, 422, validation errors): fix the payload; not for a valid
    # request that the server failed to process (SERVER_FAULT).
    INVALID_INPUT = "invalid_input"
    # A deadline passed (read/connect timeouts, 408, DEADLINE_EXCEEDED): retry fewer times with a
    # longer backoff; not for a refused connection (TRANSIENT).
    TIMEOUT = "timeout"
    # The remote side broke (500, 502, 503, 504, 529): retry with backoff; not for our own
    # malformed request (INVALID_INPUT).
    SERVER_FAULT = "server_fault"
    # No reliable signal: keep the raw message, retry at most once, then ask a human.
    UNCLASSIFIED = "unclassified"


class Signal(StrEnum):
    """Which kind of evidence decided the category, strongest first."""

    # An HTTP status or a gRPC status code, on the exception or on its response.
    STATUS = "status"
    # A provider's own error code: AWS Error.Code, OpenAI/Anthropic error code or type, SQLSTATE.
    PROVIDER_CODE = "provider_code"
    # The exception's class: a known class in its MRO, or a telling class name.
    TYPE = "type"
    # Only the message said so: the least trusted evidence.
    MESSAGE = "message"
    # Nothing recognisable: the category is UNCLASSIFIED.
    NONE = "none"


# Names other vocabularies give the eight categories, mapped onto them. Sources: the names agent
# frameworks and hand-written envelopes commonly use (auth_error, rate_limit, not_found, permanent,
# unknown …); the `error.type` values of the Anthropic and OpenAI APIs (authentication_error,
# rate_limit_error, overloaded_error …); gRPC status names (unauthenticated, deadline_exceeded …);
# HTTP reason phrases (too_many_requests, bad_request, service_unavailable …). A name is looked up
# after `normalise_name`, so "Auth-Error", "AUTH_ERROR" and "authError" are the same name. A name
# in neither the taxonomy nor this table is refused, never guessed. The README lists this table.
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

# The longest name worth reading: every canonical name and alias is far shorter.
MAX_NAME_LENGTH: Final = 50

_CAMEL_BOUNDARY: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEPARATORS: Final = re.compile(r"[\s\-.]+")


class UnknownFailureType(ValueError):
    """A failure type that is neither one of the eight categories nor one of their aliases."""

    def __init__(self, value: object) -> None:
        self.value = value
        shown = repr(value) if len(repr(value)) <= MAX_NAME_LENGTH + 2 else "that value"
        super().__init__(
            f"{shown} is not a failure type: use one of {', '.join(FailureCategory)} "
            "(or one of their aliases, such as auth_error or rate_limit)"
        )


def normalise_name(value: str) -> str:
    """Return a failure type name in the taxonomy's spelling: snake_case, lower case, trimmed.

    "authError", "Auth-Error" and " AUTH_ERROR " all become "auth_error".
    """
    name = _CAMEL_BOUNDARY.sub("_", value.strip())
    return _SEPARATORS.sub("_", name).lower()


def parse_failure_type(value: object) -> FailureCategory:
    """Return the category a failure type name means, canonical or an alias (see ALIASES).

    Raise UnknownFailureType (a ValueError naming the valid values) for anything else: a name
    in no vocabulary we know, a non-string, a string too long to be a name.
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
