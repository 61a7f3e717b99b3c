"""The fixed vocabulary of a classification: the failure categories (taxonomy version 1) and the
kinds of evidence (signals) that can decide one. Values are the JSON strings of the envelope.
Only names and their meaning live here; which evidence maps to which category is in
`classifier.rules`, and whether a category is retryable by default is `rules.DEFAULT_RETRYABLE`.
"""

from __future__ import annotations

from enum import StrEnum

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
