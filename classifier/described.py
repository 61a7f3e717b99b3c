"""Classify an error described as data, for callers that cannot hand us the exception object:
agents in other languages, through the REST API's /classify endpoint.

    {"exception_type": "httpx.ReadTimeout", "message": "read timed out", "status_code": 504,
     "headers": {"Retry-After": "3"}, "provider_code": "ThrottlingException",
     "grpc_status": "UNAVAILABLE", "retryable": null, "cause": {...the same shape, nested}}

Every key is optional. The same rules, overrides and precedence apply as for a real exception;
a builtin type name resolves to the real class, so "ConnectionResetError" counts as a
ConnectionError.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from classifier.engine import (
    DEFAULT_CLASSIFIER,
    MAX_CHAIN,
    MESSAGE_LIMIT,
    Classifier,
    Node,
    as_status,
    fallback_failure,
    grpc_name,
    type_info_for_name,
)
from classifier.failure import Failure
from classifier.retry_after import MAX_RETRY_AFTER

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
            nodes = [Node(type_info_for_name(UNNAMED), "")]
        return (classifier or DEFAULT_CLASSIFIER).classify_nodes(nodes, provider)
    except Exception:
        return fallback_failure(data)


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
    message = message[:MESSAGE_LIMIT] if isinstance(message, str) else ""
    node = Node(type_info_for_name(name[:300]), message)
    node.status = as_status(data.get("status_code"))
    codes = [
        code.strip()[:128]
        for code in (data.get("provider_code"), data.get("error_code"))
        if isinstance(code, str) and code.strip()
    ]
    if codes:
        node.codes = codes
    node.grpc = (
        grpc_name(data.get("grpc_status")) if isinstance(data.get("grpc_status"), str) else None
    )
    sqlstate = data.get("sqlstate")
    node.sqlstate = sqlstate if isinstance(sqlstate, str) else None
    headers = data.get("headers")
    node.headers = headers if isinstance(headers, Mapping | list) else None
    retryable = data.get("retryable")
    node.flag = retryable if isinstance(retryable, bool) else None
    delay = data.get("retry_after")
    if isinstance(delay, int | float) and not isinstance(delay, bool) and delay >= 0:
        node.delay = min(float(delay), MAX_RETRY_AFTER)
    return node
