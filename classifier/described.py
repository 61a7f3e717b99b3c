"""Classify an error described as data (agents in other languages, /classify, MCP tool results)
with the same rules as a real exception. Every key is optional:

    {"exception_type": "httpx.ReadTimeout", "message": "read timed out", "status_code": 504,
     "headers": {"Retry-After": "3"}, "body": {"retry_after": 3},
     "provider_code": "ThrottlingException",
     "grpc_status": "UNAVAILABLE", "retryable": null, "failure_type": null,
     "cause": {...the same shape, nested}}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from classifier.engine import DEFAULT_CLASSIFIER, Classifier
from classifier.envelope import camel_case
from classifier.failure import Failure, unreadable_failure
from classifier.judge import override_verdict
from classifier.retry_after import MAX_RETRY_AFTER
from classifier.rules import DEFAULT_RETRYABLE
from classifier.signals import (
    MAX_CHAIN,
    MESSAGE_LIMIT,
    Node,
    as_status,
    exception_class_named,
    grpc_name,
)
from classifier.taxonomy import FailureCategory, Signal, UnknownFailureType, parse_failure_type

UNNAMED: Final = "described.Error"
MCP_TOOL_ERROR: Final = "mcp.ToolError"


def classify_description(
    data: Any, *, classifier: Classifier | None = None, provider: str | None = None
) -> Failure:
    """Return the Failure a described error represents; never raises.

    The describer's own `failure_type` decides unless an operator's override matched. Fields of
    the wrong type are ignored rather than refused: the API validates its input.
    """
    classifier = classifier or DEFAULT_CLASSIFIER
    try:
        nodes = _nodes(data)
        if not nodes:
            nodes = [Node(exception_class_named(UNNAMED), "")]
        failure = classifier.classify_nodes(nodes, provider)
        stated = stated_failure_type(data)
        if stated is None or stated is failure.category:
            return failure
        if any(override_verdict(node, classifier.overrides, provider) for node in nodes):
            return failure  # an operator's override outranks the describer's own word
        return _restated(failure, stated, data)
    except Exception:
        return unreadable_failure(data)


def stated_failure_type(data: Any) -> FailureCategory | None:
    """Return the category a description names itself (`failure_type`), if it names a known one."""
    raw = data.get("failure_type") if isinstance(data, Mapping) else None
    if raw is None:
        return None
    try:
        return parse_failure_type(raw)
    except UnknownFailureType:
        return None


def _restated(failure: Failure, stated: FailureCategory, data: Mapping[str, Any]) -> Failure:
    flag = data.get("retryable")
    retryable = flag if isinstance(flag, bool) else DEFAULT_RETRYABLE[stated]
    code = data.get("failure_type")
    return replace(
        failure,
        category=stated,
        retryable=retryable,
        retry_after=failure.retry_after if retryable else None,
        provider_code=code[:128] if isinstance(code, str) else failure.provider_code,
        signal=Signal.PROVIDER_CODE,
    )


def is_mcp_result(data: Any) -> bool:
    """Return whether `data` is an MCP tool result (it has isError, in either spelling)."""
    return isinstance(data, Mapping) and ("isError" in data or "is_error" in data)


def describe_mcp_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """Return the described error an MCP tool result (isError true) stands for; never raises.

    Read at the top level, then in _meta, structuredContent and structuredContent.error, a later
    layer refining an earlier one; each field in camelCase or snake_case.
    """
    try:
        return _describe_mcp(result)
    except Exception:
        return {"exception_type": MCP_TOOL_ERROR, "message": ""}


def _describe_mcp(result: Mapping[str, Any]) -> dict[str, Any]:
    texts = [
        c.get("text")
        for c in _get(result, "content") or []
        if isinstance(c, Mapping) and c.get("type") == "text" and isinstance(c.get("text"), str)
    ]
    structured = _get(result, "structured_content")
    structured = structured if isinstance(structured, Mapping) else {}
    layers = [result, _get(result, "_meta"), structured, _get(structured, "error")]
    fields: dict[str, Any] = {}
    for layer in layers:
        if isinstance(layer, Mapping):
            fields |= {k: v for k, v in _mcp_fields(layer).items() if v is not None}
    described: dict[str, Any] = {"exception_type": MCP_TOOL_ERROR, "message": " ".join(texts)}
    code = fields.get("code")
    if isinstance(code, int) and not isinstance(code, bool):
        described["status_code"] = code
    elif isinstance(code, str) and code.strip():
        described["provider_code"] = code.strip()
    if isinstance(fields.get("retryable"), bool):
        described["retryable"] = fields["retryable"]
    delay = fields.get("retry_after")
    if isinstance(delay, int | float | str) and not isinstance(delay, bool):
        described["headers"] = {"Retry-After": str(delay)}
    if isinstance(fields.get("message"), str) and not texts:
        described["message"] = fields["message"]
    if fields.get("failure_type") is not None:
        described["failure_type"] = fields["failure_type"]
    return described


def _mcp_fields(layer: Mapping[str, Any]) -> dict[str, Any]:
    code = _get(layer, "code")
    if code is None:
        code = _get(layer, "status_code", "status")
    delay = _get(layer, "retry_after", "retry_after_seconds")
    return {
        "code": code,
        "retryable": _get(layer, "is_retryable", "retryable"),
        "retry_after": delay,
        "message": _get(layer, "message"),
        "failure_type": _get(layer, "error_category"),
    }


def _get(data: Any, *names: str) -> Any:
    if not isinstance(data, Mapping):
        return None
    for name in names:
        for key in (name,) if name.startswith("_") else (name, camel_case(name)):
            if key in data:
                return data[key]
    return None


def _nodes(data: Any) -> list[Node]:
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
    name = data.get("exception_type")
    name = name.strip() if isinstance(name, str) and name.strip() else UNNAMED
    message = data.get("message")
    codes = (data.get("provider_code"), data.get("error_code"))
    grpc = data.get("grpc_status")
    sqlstate = data.get("sqlstate")
    headers = data.get("headers")
    body = data.get("body")
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
        body=body if isinstance(body, Mapping | str) else None,
    )


def _delay(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return min(float(value), MAX_RETRY_AFTER)
    return None
