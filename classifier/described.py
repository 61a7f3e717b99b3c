"""Classify an error described as data, for callers that cannot hand us the exception object:
agents in other languages, through the REST API's /classify endpoint. Every key of the shape
below is optional. The same rules, overrides and precedence apply as for a real exception: this
module only turns the description into the nodes `classifier.signals` would have read (a
builtin type name resolves to the real class, so "ConnectionResetError" counts as a
ConnectionError) and hands them to the classifier; it holds no rule of its own.

    {"exception_type": "httpx.ReadTimeout", "message": "read timed out", "status_code": 504,
     "headers": {"Retry-After": "3"}, "provider_code": "ThrottlingException",
     "grpc_status": "UNAVAILABLE", "retryable": null, "cause": {...the same shape, nested}}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from classifier.engine import DEFAULT_CLASSIFIER, Classifier
from classifier.failure import Failure, unreadable_failure
from classifier.retry_after import MAX_RETRY_AFTER
from classifier.signals import (
    MAX_CHAIN,
    MESSAGE_LIMIT,
    Node,
    as_status,
    exception_class_named,
    grpc_name,
)

# The class name used when a description names none.
UNNAMED: Final = "described.Error"


def classify_description(
    data: Any, *, classifier: Classifier | None = None, provider: str | None = None
) -> Failure:
    """Return the Failure a described error represents; never raises.

    Anything that is not a mapping, and any field of the wrong type, is ignored rather than
    rejected: the API validates its input, this function only has to be safe.
    """
    try:
        nodes = _nodes(data)
        if not nodes:
            nodes = [Node(exception_class_named(UNNAMED), "")]
        return (classifier or DEFAULT_CLASSIFIER).classify_nodes(nodes, provider)
    except Exception:
        return unreadable_failure(data)


def _nodes(data: Any) -> list[Node]:
    """Return one node per level of the description's cause/context chain, outermost first."""
    nodes: list[Node] = []
    seen: set[int] = set()
    pending = [data]
    while pending and len(nodes) < MAX_CHAIN:
        current = pending.pop(0)
        if not isinstance(current, Mapping) or id(current) in seen:
            continue
        seen.add(id(current))
        nodes.append(_node(current))
        pending.extend(current.get(key) for key in ("cause", "context"))
    return nodes


def _node(data: Mapping[str, Any]) -> Node:
    """Return the evidence of one described error."""
    name = data.get("exception_type")
    name = name.strip() if isinstance(name, str) and name.strip() else UNNAMED
    message = data.get("message")
    codes = (data.get("provider_code"), data.get("error_code"))
    grpc = data.get("grpc_status")
    sqlstate = data.get("sqlstate")
    headers = data.get("headers")
    retryable = data.get("retryable")
    return Node(
        exception_class_named(name[:300]),
        message[:MESSAGE_LIMIT] if isinstance(message, str) else "",
        status=as_status(data.get("status_code")),
        codes=tuple(code.strip()[:128] for code in codes if isinstance(code, str) and code.strip()),
        grpc=grpc_name(grpc) if isinstance(grpc, str) else None,
        sqlstate=sqlstate if isinstance(sqlstate, str) else None,
        headers=headers if isinstance(headers, Mapping | list) else None,
        flag=retryable if isinstance(retryable, bool) else None,
        delay=_delay(data.get("retry_after")),
    )


def _delay(value: Any) -> float | None:
    """Return a described delay in seconds, capped, if it is a non-negative number."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return min(float(value), MAX_RETRY_AFTER)
    return None
