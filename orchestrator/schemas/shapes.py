"""The other shapes a run's outcome arrives in, folded into the envelope before validation: an
outcome without `status` (a `failure_type` says error, `results` say ok) and an MCP tool result
(`isError`, its text `content`, and the error fields it nests in `structuredContent` or `_meta`).
The top level's own names (`errorCategory`, `isRetryable`, `retryAfter`, `message` …) stay where
they are: the fields read them under those names, and refuse one sent twice."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from classifier.described import classify_description, describe_mcp_result, is_mcp_result
from classifier.envelope import field_names
from classifier.retry_after import parse_retry_after
from orchestrator.schemas.common import _error

# What an MCP result holds that is no envelope field: folded here, then dropped.
MCP_KEYS = frozenset(
    {"isError", "is_error", "content", "structuredContent", "structured_content", "_meta", "code"}
)


def _given(data: dict[str, Any], name: str) -> str | None:
    """The key `data` gives field `name` under, if any."""
    return next((key for key in field_names(name) if key in data), None)


def infer_status(data: dict[str, Any]) -> dict[str, Any]:
    """Return `data` with the `status` its fields imply when it has none: a failure type means
    error, results mean ok; otherwise unchanged (a status is then required)."""
    if "status" in data:
        return data
    failure_type = _given(data, "failure_type")
    if failure_type is not None and data[failure_type] is not None:
        return data | {"status": "error"}
    if _given(data, "results") is not None:
        return data | {"status": "ok"}
    return data


def fold_mcp_result(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """Return an MCP tool result as an envelope (anything else unchanged): `isError` as the
    status, the text content as the detail, a success's content as its results, and the nested
    errorCategory, isRetryable, retryAfter and code lifted where the top level does not say them.
    A failure naming no category is classified from what it says."""
    if not is_mcp_result(data):
        return data
    is_error = data.get("isError", data.get("is_error"))
    out = {key: value for key, value in data.items() if key not in MCP_KEYS}
    status = out.get("status")
    if isinstance(is_error, bool) and status is not None and (status == "error") != is_error:
        key = "isError" if "isError" in data else "is_error"
        message = f"says {'a failure' if is_error else 'a success'}, status says {status}"
        raise ValidationError.from_exception_data(
            model.__name__, [_error("conflict", message, key, is_error)]
        )
    if is_error is not True:
        out.setdefault("status", "ok")
        content = data.get("content")
        if _given(out, "results") is None and isinstance(content, list):
            out["results"] = content
        return out
    out.setdefault("status", "error")
    described = describe_mcp_result(data)
    lifted = {
        "failure_type": described.get("failure_type"),
        "retryable": described.get("retryable"),
        "retry_after": parse_retry_after(described.get("headers")),
        "status_code": described.get("status_code"),
        "provider_code": described.get("provider_code"),
        "detail": described.get("message") or None,
    }
    if lifted["failure_type"] is None and _given(out, "failure_type") is None:
        lifted["failure_type"] = classify_description(described).category.value
    for name, value in lifted.items():
        if value is not None and _given(out, name) is None:
            out[name] = value
    return out


def fold_shapes(model: type[BaseModel], data: dict[str, Any]) -> dict[str, Any]:
    """Return `data` as the envelope `model` reads: an MCP result folded, the status inferred."""
    return infer_status(fold_mcp_result(model, data))
