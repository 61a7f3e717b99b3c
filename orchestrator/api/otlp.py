"""OpenTelemetry in: `POST /otlp/v1/traces`, the OTLP/HTTP trace endpoint (protobuf or JSON,
plain or compressed), spans stored as runs. Which spans become runs is `spans`'.
"""

from __future__ import annotations

import base64
import zlib
from typing import Any

import orjson
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from ninja import Router
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from orchestrator.api.bodies import deeper_than
from orchestrator.api.errors import ApiError, error_responses, invalid
from orchestrator.coordination import policy
from orchestrator.ingest import span_joins
from orchestrator.vocabulary import FailureCategory

router = Router(tags=["opentelemetry"])

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
QUOTED_REASONS = 5
# Fields of the OTLP JSON encoding that carry ids: hex there, base64 in protobuf's JSON mapping.
HEX_IDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")

REQUEST_BODY = {
    "required": True,
    "description": "An OTLP ExportTraceServiceRequest (opentelemetry-proto), as an OTLP/HTTP "
    "exporter sends it; `Content-Encoding: gzip` or `deflate` accepted.",
    "content": {
        PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
        JSON: {"schema": {"type": "object", "description": "OTLP/JSON: ids in hex"}},
    },
}


RESPONSE_BODY = {
    "description": "An OTLP ExportTraceServiceResponse, in the request's encoding",
    "content": {
        PROTOBUF: {"schema": {"type": "string", "format": "binary"}},
        JSON: {"schema": {"type": "object", "description": '{"partialSuccess": {…}} or {}'}},
    },
}


@router.post(
    "/v1/traces",
    response={200: None, **error_responses(415, body=True)},
    openapi_extra={"requestBody": REQUEST_BODY, "responses": {200: RESPONSE_BODY}},
)
def export_traces(request: HttpRequest) -> HttpResponse:
    """Store the spans of an OTLP export as runs (docs/api.md: "OpenTelemetry in").

    GenAI spans (agent, model and tool calls) become runs, ok or failed; other spans become runs
    only when they failed and no ancestor in the same trace is a run, whose failure they then
    explain; plain spans are skipped. The failure type is classified from what the span says
    (status, `error.type`, `exception` events, `http.response.status_code` …) with the provider
    overrides. Spans of one trace exported in different batches make the same runs as one export:
    a failed span waits (OTLP_JOIN_WAIT_SECONDS at most) for its parent, and a late part updates
    its run. A span already stored (an exporter's retry) is not stored again. The answer is an
    `ExportTraceServiceResponse` in the request's encoding (`partial_success` counts the spans
    refused, with the reasons)."""
    as_json = _media_type(request) == JSON
    export = _decode(_body(request), as_json)
    stored = span_joins.store_export(request.auth.pk, export, policy.current_classifier())
    return _answer(stored.refused, as_json)


def _media_type(request: HttpRequest) -> str:
    media = request.content_type.split(";", 1)[0].strip().lower()
    if media not in (PROTOBUF, JSON):
        raise ApiError(
            415,
            FailureCategory.INVALID_INPUT,
            f"Content-Type {media or '(none)'!r} is not OTLP/HTTP: send {PROTOBUF} or {JSON}.",
            alternatives=[f"set the exporter's protocol to http/protobuf ({PROTOBUF})"],
        )
    return media


def _too_big() -> ApiError:
    limit = settings.API_MAX_BODY_BYTES
    return ApiError(
        413,
        FailureCategory.INVALID_INPUT,
        f"The body is larger than {limit} bytes (uncompressed).",
        alternatives=["export smaller batches (the batch processor's max_export_batch_size)"],
    )


def _body(request: HttpRequest) -> bytes:
    """The body, uncompressed, at most API_MAX_BODY_BYTES (a gzip bomb is a 413)."""
    limit = settings.API_MAX_BODY_BYTES
    try:
        body = request.body
    except RequestDataTooBig:
        raise _too_big() from None
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        data = body
    elif encoding in ("gzip", "deflate"):
        # wbits: 16+ reads the gzip wrapper, + 0 the zlib one that "deflate" means in HTTP.
        inflater = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS)
        try:
            data = inflater.decompress(body, limit + 1)
        except zlib.error as exc:
            raise invalid(f"The body is not valid {encoding}: {exc}", status=400) from None
        if len(data) <= limit and not inflater.eof:
            raise invalid(f"The {encoding} body is truncated.", status=400)
    else:
        raise ApiError(
            415,
            FailureCategory.INVALID_INPUT,
            f"Content-Encoding {encoding!r} is not supported: send gzip, deflate or none.",
        )
    if len(body) > limit or len(data) > limit:  # a chunked body has no Content-Length
        raise _too_big()
    return data


def _decode(body: bytes, as_json: bool) -> ExportTraceServiceRequest:
    if not as_json:
        try:
            return ExportTraceServiceRequest.FromString(body)
        except (DecodeError, RecursionError) as exc:
            raise invalid(f"The body is not an OTLP protobuf export: {exc}", status=400) from None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise invalid(f"The body is not valid JSON: {exc}", status=400) from None
    if not isinstance(data, dict) or deeper_than(data, settings.API_MAX_JSON_DEPTH):
        raise invalid("The body is not an OTLP JSON export (an object, not too deep).", status=400)
    try:
        return json_format.ParseDict(
            _ids_as_base64(data), ExportTraceServiceRequest(), ignore_unknown_fields=True
        )
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise invalid(f"The body is not an OTLP JSON export: {exc}", status=400) from None


def _ids_as_base64(data: Any) -> Any:
    """OTLP/JSON writes trace and span ids in hex; protobuf's JSON mapping reads bytes as base64."""
    if isinstance(data, list):
        return [_ids_as_base64(item) for item in data]
    if not isinstance(data, dict):
        return data
    out = {}
    for key, value in data.items():
        if key in HEX_IDS and isinstance(value, str):
            try:
                value = base64.b64encode(bytes.fromhex(value)).decode()
            except ValueError:
                raise invalid(f"{key} {value[:40]!r} is not hexadecimal.", status=400) from None
        out[key] = _ids_as_base64(value)
    return out


def _answer(refused: list[str], as_json: bool) -> HttpResponse:
    answer = ExportTraceServiceResponse()
    if refused:
        answer.partial_success.rejected_spans = len(refused)
        more = len(refused) - QUOTED_REASONS
        message = "; ".join(refused[:QUOTED_REASONS]) + (f"; and {more} more" if more > 0 else "")
        answer.partial_success.error_message = message
    if as_json:
        body = json_format.MessageToJson(answer, indent=None)
        return HttpResponse(body, content_type=JSON)
    return HttpResponse(answer.SerializeToString(), content_type=PROTOBUF)
