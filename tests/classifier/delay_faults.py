"""Fault scenarios that say how long to wait elsewhere than in Retry-After: in the body (seconds,
milliseconds, camelCase, a google.rpc RetryInfo), in the IETF RateLimit field, a header beside a
body; and a gRPC status carrying a RetryInfo detail. `faults` serves them."""

from __future__ import annotations

import json
from typing import Any

JSON = "application/json"


def _json(data: object) -> bytes:
    return json.dumps(data).encode()


# name -> (status, headers, body, content type), as faults.SCENARIOS
DELAY_SCENARIOS: dict[str, tuple[int, dict[str, Any], bytes, str]] = {
    # The delay said in the body (Discord-style seconds, milliseconds, camelCase), in the IETF
    # RateLimit field (the current drafts' and an earlier one's), and a header beside a body.
    "body-retry-after": (429, {}, _json({"message": "rate limited", "retry_after": 6.5}), JSON),
    "body-retry-after-ms": (429, {}, _json({"error": {"retry_after_ms": 2500}}), JSON),
    "body-retry-after-camel": (503, {}, _json({"error": "busy", "retryAfter": 11}), JSON),
    "ratelimit-structured": (429, {"RateLimit": '"default";r=0;t=50'}, b"{}", JSON),
    "ratelimit-structured-draft": (
        429,
        {"RateLimit": "limit=100, remaining=0, reset=50"},
        b"{}",
        JSON,
    ),
    "header-and-body-retry-after": (429, {"Retry-After": "3"}, _json({"retry_after": 40}), JSON),
    # Google's JSON error with a google.rpc.RetryInfo detail (googleapis' error model).
    "google-retry-info": (
        429,
        {},
        _json(
            {
                "error": {
                    "code": 429,
                    "message": "Quota exceeded for quota metric 'Requests'.",
                    "status": "RESOURCE_EXHAUSTED",
                    "details": [
                        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "30s"}
                    ],
                }
            }
        ),
        JSON,
    ),
}


# Asks /fault.Fault/Abort for RESOURCE_EXHAUSTED with a google.rpc.RetryInfo of 30 s in the
# status details (grpc-status-details-bin), as Google's services send quota errors.
RETRY_INFO_REQUEST = b"RESOURCE_EXHAUSTED+RetryInfo"


def quota_status_with_retry_info() -> Any:
    from google.protobuf import any_pb2, duration_pb2
    from google.rpc import code_pb2, error_details_pb2, status_pb2
    from grpc_status import rpc_status

    detail = any_pb2.Any()
    detail.Pack(error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=30)))
    status = status_pb2.Status(
        code=code_pb2.RESOURCE_EXHAUSTED, message="Quota exceeded", details=[detail]
    )
    return rpc_status.to_status(status)
