"""The envelope a subagent returns, success or not: a top-level status for dashboards and the
detail a coordinator needs to recover. Both shapes are JSON-ready and round-trip through JSON."""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final

from classifier.engine import DEFAULT_CLASSIFIER, Classifier
from classifier.failure import Failure
from classifier.taxonomy import TAXONOMY_VERSION, UnknownFailureType, parse_failure_type
from classifier.usage import usage_of

# Deeper data is replaced by its str(), which also ends reference cycles.
MAX_DEPTH: Final = 20
MAX_DETAIL: Final = 2000

# The one declaration of the envelope's fields; every other list of them (the server's schema
# and run columns, the scrubber, the client) is derived from these.
ENVELOPE_KEYS: Final = (
    "status",
    "failure_type",
    "retryable",
    "retry_after",
    "attempted",
    "partial_results",
    "alternatives",
    "detail",
    "results",
)
EVIDENCE_KEYS: Final = (
    "status_code",
    "provider_code",
    "exception_type",
    "signal",
    "chain",
    "taxonomy_version",
)
# What the call asked for and what could be tried instead: known before it has an outcome.
REQUEST_KEYS: Final = ("status", "attempted", "alternatives")
# The outcome: what a call that has only started cannot say yet (`taxonomy_version` names the
# vocabulary, not an outcome).
OUTCOME_KEYS: Final = tuple(
    key
    for key in (*ENVELOPE_KEYS, *EVIDENCE_KEYS)
    if key not in (*REQUEST_KEYS, "taxonomy_version")
)
# The exception a failure describes, as a classifier reads it again (`classifier.reported`).
EXCEPTION_KEYS: Final = ("exception_type", "chain", "status_code", "provider_code", "detail")
# What the agent's call held, where a secret can hide (`classifier.scrub`).
HELD_KEYS: Final = ("attempted", "partial_results", "results", "alternatives", "detail", "chain")

# Other names agents give envelope fields; every field is also read in camelCase.
FIELD_ALIASES: Final = MappingProxyType(
    {
        "alternatives": ("alternatives_suggested", "suggested_alternatives"),
        "retryable": ("retry_recommended", "is_retryable"),  # the latter MCP's isRetryable
        "failure_type": ("error_category",),  # MCP's errorCategory
        "detail": ("message",),
    }
)
# Some agents send a bare query string instead of an `attempted` object.
ATTEMPTED_QUERY: Final = "attempted_query"


def error_envelope(
    exc: BaseException,
    *,
    attempted: Mapping[str, Any] | None = None,
    partial_results: Iterable[Any] | None = None,
    alternatives: Iterable[Any] | None = None,
    classifier: Classifier | None = None,
    provider: str | None = None,
) -> dict[str, Any]:
    """Return the error envelope for `exc`: the ENVELOPE_KEYS plus the EVIDENCE_KEYS, and
    `usage` when the failing call says what it used (`classifier.usage`); never raises. Partial
    results are kept (3 of 5 sources found is 3 results, not 0)."""
    failure = (classifier or DEFAULT_CLASSIFIER).classify(exc, provider)
    envelope = failure_envelope(
        failure,
        attempted=attempted,
        partial_results=partial_results,
        alternatives=alternatives,
    )
    usage = usage_of(exc)
    if usage:
        envelope["usage"] = usage
    return envelope


def failure_envelope(
    failure: Failure,
    *,
    attempted: Mapping[str, Any] | None = None,
    partial_results: Iterable[Any] | None = None,
    alternatives: Iterable[Any] | None = None,
) -> dict[str, Any]:
    """Return the error envelope of an already classified `failure`."""
    return {
        "status": "error",
        "failure_type": failure.category.value,
        "retryable": failure.retryable,
        "retry_after": failure.retry_after,
        "attempted": _attempted(attempted),
        "partial_results": _list(partial_results),
        "alternatives": [a if isinstance(a, str) else _text(a) for a in _list(alternatives)],
        "detail": failure.detail[:MAX_DETAIL],
        "results": [],
        "status_code": failure.status_code,
        "provider_code": failure.provider_code,
        "exception_type": failure.exception_type,
        "signal": failure.signal.value,
        "chain": list(failure.chain),
        "taxonomy_version": TAXONOMY_VERSION,
    }


def success_envelope(
    results: Iterable[Any] | None, *, attempted: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Return the success envelope; an empty `results` is a valid "ok" with zero items."""
    return {
        "status": "ok",
        "failure_type": None,
        "retryable": False,
        "retry_after": None,
        "attempted": _attempted(attempted),
        "partial_results": [],
        "alternatives": [],
        "detail": "",
        "results": _list(results),
        "taxonomy_version": TAXONOMY_VERSION,
    }


def failure_from_envelope(envelope: Any) -> Failure | None:
    """Return the Failure an error envelope describes, or None if it is a success; lenient and
    never raises (an unknown failure_type becomes UNCLASSIFIED)."""
    data = normalise_envelope(envelope) if isinstance(envelope, Mapping) else {}
    if data.get("status") == "ok":
        return None
    return Failure.from_dict(data)


def camel_case(name: str) -> str:
    """Return the camelCase form of a snake_case field name ("retry_after" → "retryAfter")."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


@functools.cache
def field_names(name: str) -> tuple[str, ...]:
    """Return every name `name` is read under: itself first, its aliases, their camelCase forms."""
    names = [name, *FIELD_ALIASES.get(name, ())]
    return tuple(dict.fromkeys([*names, *(camel_case(n) for n in names)]))


def normalise_envelope(data: Mapping[str, Any]) -> dict[str, Any]:
    """Return an envelope written with other names (aliases, camelCase) under our names.

    Lenient: the canonical name wins over an alias, unknown keys and failure types are kept.
    """
    known = (*ENVELOPE_KEYS, *EVIDENCE_KEYS)
    alias_of = {alias: name for name in known for alias in field_names(name)[1:]}
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = alias_of.get(key, key) if isinstance(key, str) else key
        if name not in out or name == key:
            out[name] = value
    query = next((data[n] for n in field_names(ATTEMPTED_QUERY) if n in data), None)
    out = {k: v for k, v in out.items() if k not in field_names(ATTEMPTED_QUERY)}
    if query is not None:
        attempted = out.get("attempted")
        attempted = dict(attempted) if isinstance(attempted, Mapping) else {}
        out["attempted"] = {"query": query} | attempted
    try:
        if out.get("failure_type") is not None:
            out["failure_type"] = parse_failure_type(out["failure_type"]).value
    except UnknownFailureType:
        pass
    return out


def jsonable(value: Any, depth: int = 0) -> Any:
    """Return `value` as data that json.dumps accepts and json.loads gives back; never raises."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth >= MAX_DEPTH:
        return _text(value)
    try:
        if isinstance(value, Mapping):
            return {_key(k): jsonable(v, depth + 1) for k, v in value.items()}
        if isinstance(value, bytes | bytearray):
            return bytes(value).decode("utf-8", "replace")
        if isinstance(value, list | tuple | set | frozenset):
            items = sorted(value, key=_text) if isinstance(value, set | frozenset) else value
            return [jsonable(v, depth + 1) for v in items]
    except Exception:
        pass
    return _text(value)


def _attempted(attempted: Any) -> dict[str, Any]:
    try:
        if attempted is None:
            return {}
        if isinstance(attempted, Mapping):
            return jsonable(attempted)
        return {"description": _text(attempted)}
    except Exception:
        return {"description": _text(attempted)}


def _list(values: Any) -> list[Any]:
    if values is None:
        return []
    try:
        if isinstance(values, Mapping | str | bytes):
            return [jsonable(values)]
        return [jsonable(v) for v in values]
    except Exception:
        return []


def _key(key: Any) -> str:
    return key if isinstance(key, str) else _text(key)


def _text(value: Any) -> str:
    try:
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"
