"""What a model call used, read from what the provider answered or raised: its `usage` as the
report's `usage` field (input, output and cached tokens, the model). Duck-typed, standard library
only: an OpenAI, Anthropic or Gemini response object, its JSON as a mapping, or an exception
carrying either (the SDKs keep an error's parsed body in `.body`; a stream cut short after the
prompt was read still says what it cost).

The input count includes the cached tokens, as OpenAI and OpenTelemetry count them; Anthropic
counts cache reads and writes apart, so they are added to its input count here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

# The usage object's name in a response, and in Gemini's.
USAGE_NAMES: Final = ("usage", "usage_metadata", "usageMetadata")
INPUT: Final = ("input_tokens", "prompt_tokens", "prompt_token_count", "promptTokenCount")
OUTPUT: Final = (
    "output_tokens",
    "completion_tokens",
    "candidates_token_count",
    "candidatesTokenCount",
)
# Anthropic's cache counts, outside its input_tokens.
CACHE_READ: Final = "cache_read_input_tokens"
CACHE_WRITE: Final = "cache_creation_input_tokens"
# Cached tokens inside the input count: OpenAI's details, Gemini's count.
CACHED_INSIDE: Final = ("cached_content_token_count", "cachedContentTokenCount")
DETAILS: Final = ("prompt_tokens_details", "input_tokens_details")
MAX_DEPTH: Final = 3


def _get(value: Any, name: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(name)
    try:
        return getattr(value, name, None)
    except Exception:  # a property that raises says nothing
        return None


def _count(value: Any, names: tuple[str, ...]) -> int | None:
    for name in names:
        found = _get(value, name)
        if isinstance(found, int) and not isinstance(found, bool) and found >= 0:
            return found
    return None


def _usage_object(value: Any, depth: int = 0) -> tuple[Any, Any] | None:
    """(the usage object, what holds it) in `value`, an exception's body or its error."""
    if value is None or depth > MAX_DEPTH:
        return None
    for name in USAGE_NAMES:
        found = _get(value, name)
        if found is not None and not isinstance(found, str | bytes | int | float):
            return found, value
    for name in ("body", "error", "response_json"):
        inner = _get(value, name)
        if inner is not None and inner is not value and not isinstance(inner, str | bytes):
            found = _usage_object(inner, depth + 1)
            if found is not None:
                return found
    return None


def usage_of(value: Any) -> dict[str, Any] | None:
    """The `usage` a report carries for `value` (a response, its JSON, or an exception), or None
    when it names no token count."""
    found = _usage_object(value)
    if found is None:
        return None
    usage, holder = found
    given = _count(usage, INPUT)
    output = _count(usage, OUTPUT)
    read, write = _count(usage, (CACHE_READ,)), _count(usage, (CACHE_WRITE,))
    cached = read
    if read is not None or write is not None:
        given = (given or 0) + (read or 0) + (write or 0)
    else:
        cached = _count(usage, CACHED_INSIDE)
        for name in DETAILS:
            details = _get(usage, name)
            if details is not None and cached is None:
                cached = _count(details, ("cached_tokens",))
    if given is None and output is None:
        return None
    report: dict[str, Any] = {"input_tokens": given, "output_tokens": output}
    if cached is not None:
        report["cached_tokens"] = cached
    model = _get(holder, "model") or _get(holder, "model_version") or _get(holder, "modelVersion")
    if isinstance(model, str) and model:
        report["model"] = model[:200]
    return {k: v for k, v in report.items() if v is not None}
