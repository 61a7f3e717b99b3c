"""Reading OpenTelemetry spans as runs: which spans are runs, and what each one says
(the rule: docs/api.md, "OpenTelemetry in"). A failed plain span under a model or tool call, or
under a failed span, is the *cause* of that outcome, not a run; under an agent invocation that
went on, it is one of the agent's own steps. A span with status OK is a success even with an
exception event: the instrumentation said it recovered.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from classifier import Classifier, Failure
from classifier.described import classify_description
from classifier.scrub import Scrubber
from classifier.taxonomy import UnknownFailureType, parse_failure_type
from orchestrator.api.bodies import replace_nul

KEY_PREFIX: Final = "otlp"

# The GenAI semantic conventions' attributes, and OpenInference's and OpenLLMetry's.
GENAI_MARKERS: Final = (
    "gen_ai.operation.name",
    "gen_ai.tool.name",
    "gen_ai.agent.name",
    "gen_ai.provider.name",
    "gen_ai.system",
    "openinference.span.kind",
    "traceloop.span.kind",
)
KIND_OPERATIONS: Final = {
    "llm": "chat",
    "tool": "execute_tool",
    "agent": "invoke_agent",
    "embedding": "embeddings",
    "chain": "chain",
}
AGENT_OPERATIONS: Final = frozenset({"invoke_agent", "create_agent", "chain", "workflow", "task"})
AGENT_NAMES: Final = ("gen_ai.agent.name", "agent.name")
TOOL_NAMES: Final = ("gen_ai.tool.name", "tool.name")
PROVIDER_NAMES: Final = ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")
SERVER_NAMES: Final = ("server.address", "peer.service", "net.peer.name")
STATUS_CODES: Final = ("http.response.status_code", "http.status_code", "rpc.response.status_code")
RETRY_AFTER_HEADERS: Final = (
    "http.response.header.retry-after",
    "http.response.header.retry-after-ms",
    "http.response.header.x-ratelimit-reset",
    "http.response.header.ratelimit-reset",
    "http.response.header.x-should-retry",  # the provider's own say on retrying, as over HTTP
)
ATTEMPTED: Final = {
    "model": "gen_ai.request.model",
    "tool_call": "gen_ai.tool.call.id",
    "arguments": "gen_ai.tool.call.arguments",
    "conversation": "gen_ai.conversation.id",
    "method": "http.request.method",
}
RESULTS: Final = {
    "model": "gen_ai.response.model",
    "response": "gen_ai.response.id",
    "finish_reasons": "gen_ai.response.finish_reasons",
    "input_tokens": "gen_ai.usage.input_tokens",
    "output_tokens": "gen_ai.usage.output_tokens",
    "result": "gen_ai.tool.call.result",
    "status_code": "http.response.status_code",
}
# What a model call used (`usage`), in the GenAI semantic conventions' names, their older ones and
# OpenInference's; the cached count where a convention names one.
USAGE: Final = {
    "input_tokens": (
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.prompt_tokens",
        "llm.token_count.prompt",
    ),
    "output_tokens": (
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.completion_tokens",
        "llm.token_count.completion",
    ),
    "cached_tokens": (
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.cache_read_input_tokens",
        "llm.token_count.prompt_details.cache_read",
    ),
}
# The model that answered, else the one asked for.
MODEL_NAMES: Final = ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name")
GRPC_NAMES: Final = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)
OTHER_ERROR: Final = "_OTHER"
EXCEPTION_EVENT: Final = "exception"
UNNAMED_SPAN: Final = "otlp.SpanError"
CLASS_SUFFIXES: Final = ("Error", "Exception", "Timeout", "Exceeded", "Refused")
UNKNOWN_SERVICE: Final = "unknown_service"
VALUE_LIMIT = 1000  # characters of one attribute kept in attempted / results
STACK_LIMIT = 8000  # its end is kept: the raise
MAX_DEPTH = 64  # parent links followed, against a cycle in a hand-made payload


@dataclass(slots=True)
class SpanView:
    span: Span
    resource: dict[str, Any]
    attrs: dict[str, Any]
    trace_id: str
    span_id: str
    parent_id: str
    genai: bool = False
    failed: bool = False
    causes: list[SpanView] = field(default_factory=list)
    resource_bytes: bytes = b""  # the resource as sent (protobuf), kept with a failed span
    kept: Any = None  # the `TraceSpan` row this span was kept as, read back with a later export

    @property
    def key(self) -> tuple[str, str]:
        return self.trace_id, self.span_id

    def first(self, names: Sequence[str]) -> Any:
        return next((self.attrs[n] for n in names if self.attrs.get(n) not in (None, "")), None)

    def exception(self) -> dict[str, Any]:
        """The attributes of the span's last `exception` event (the one that escaped), if any."""
        events = [e for e in self.span.events if e.name == EXCEPTION_EVENT]
        return attributes(events[-1].attributes) if events else {}


@dataclass(slots=True)
class SpanRun:
    item: dict[str, Any]
    digest: str
    label: str


def value_of(value: AnyValue) -> Any:
    """The Python value of an OTLP AnyValue (bytes as hex, nested arrays and maps as JSON)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes(value.kvlist_value.values)
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind)


def attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: value_of(kv.value) for kv in pairs}


def any_value(value: Any) -> AnyValue:
    """`value_of` the other way: an OTLP AnyValue holding a Python value."""
    out = AnyValue()
    if isinstance(value, bool):
        out.bool_value = value
    elif isinstance(value, int):
        out.int_value = value
    elif isinstance(value, float):
        out.double_value = value
    elif isinstance(value, str):
        out.string_value = value
    elif isinstance(value, list):
        out.array_value.values.extend(any_value(v) for v in value)
    elif isinstance(value, dict):
        pairs = (KeyValue(key=k, value=any_value(v)) for k, v in value.items())
        out.kvlist_value.values.extend(pairs)
    return out


def scrub_attributes(pairs: Any, scrubber: Scrubber) -> None:
    """Filter the secrets out of OTLP attributes in place (`classifier.scrub`)."""
    values = attributes(pairs)
    clean, _ = scrubber.scrub(values)
    if clean is values:
        return
    for kv in pairs:
        if len(values) < len(pairs):  # a key sent twice: each pair on its own
            value = value_of(kv.value)
            new = scrubber.scrub({kv.key: value})[0][kv.key]
        else:
            value, new = values[kv.key], clean[kv.key]
        if new is not value:
            kv.value.CopyFrom(any_value(new))


def scrub_span(span: Span, scrubber: Scrubber) -> None:
    """Filter the secrets out of a span as sent, before anything of it is read or kept: its
    attributes, its events' (an exception's message and stack trace), its links', its name and
    its status message."""
    scrub_attributes(span.attributes, scrubber)
    for part in (*span.events, *span.links):
        scrub_attributes(part.attributes, scrubber)
    for holder, name in ((span, "name"), (span.status, "message")):
        text = getattr(holder, name)
        clean = scrubber.text(text)[0]
        if clean != text:
            setattr(holder, name, clean)


def _clip(value: Any) -> Any:
    if isinstance(value, str):
        return value[:VALUE_LIMIT]
    if isinstance(value, list):
        return [_clip(v) for v in value[:50]]
    return value


def _text(value: Any, limit: int) -> str:
    return str(value)[:limit] if value not in (None, "") else ""


def is_genai(attrs: Mapping[str, Any]) -> bool:
    return any(attrs.get(name) not in (None, "") for name in GENAI_MARKERS)


def has_failed(view: SpanView) -> bool:
    """Status ERROR; or status unset and an exception event or error.type says it failed."""
    code = view.span.status.code
    if code == Status.STATUS_CODE_OK:
        return False
    if code == Status.STATUS_CODE_ERROR:
        return True
    named = view.attrs.get("error.type") not in (None, "")
    return named or any(e.name == EXCEPTION_EVENT for e in view.span.events)


def view_of(span: bytes, resource: bytes) -> SpanView:
    """The span of a protobuf `Span` and `Resource` (as a `TraceSpan` keeps them)."""
    attrs = attributes(Resource.FromString(resource).attributes)
    return _view(Span.FromString(span), attrs, resource)


def _view(span: Span, resource: dict[str, Any], resource_bytes: bytes) -> SpanView:
    attrs = attributes(span.attributes)
    ids = span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex()
    view = SpanView(span, resource, attrs, *ids, resource_bytes=resource_bytes)
    view.genai = is_genai(attrs)
    view.failed = has_failed(view)
    return view


def read_views(
    request: ExportTraceServiceRequest, invalid: list[str], scrubber: Scrubber
) -> list[SpanView]:
    """Every span of an export with valid ids, its secrets filtered; the others are refused into
    `invalid`."""
    views = []
    for resource_spans in request.resource_spans:
        scrub_attributes(resource_spans.resource.attributes, scrubber)
        resource = attributes(resource_spans.resource.attributes)
        resource_bytes = resource_spans.resource.SerializeToString()
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                scrub_span(span, scrubber)  # before anything of it is read or kept
                trace, own = span.trace_id.hex(), span.span_id.hex()
                if len(trace) != 32 or len(own) != 16 or not trace.strip("0") or not own.strip("0"):
                    invalid.append(f"span {span.name[:100]!r}: invalid trace_id or span_id")
                    continue
                views.append(_view(span, resource, resource_bytes))
    return views


def ancestors(view: SpanView, by_key: Mapping[tuple[str, str], SpanView]) -> Iterator[SpanView]:
    seen = {view.key}
    current = view
    for _ in range(MAX_DEPTH):
        parent = by_key.get((current.trace_id, current.parent_id))
        if parent is None or parent.key in seen:
            return
        seen.add(parent.key)
        yield parent
        current = parent


def select(views: Sequence[SpanView]) -> list[SpanView]:
    """Return the spans that are runs; attach each failed span that is not one to the nearest
    ancestor that is (or that failed), as a cause of its outcome."""
    by_key = {view.key: view for view in views}
    runs = []
    for view in views:
        if not (view.genai or view.failed):
            continue
        carrier = carrier_of(view, by_key)
        explains = carrier is not None and (carrier.failed or not is_agent(carrier))
        if view.genai or not explains:
            runs.append(view)
        elif carrier is not None:
            carrier.causes.append(view)
    return runs


def carrier_of(view: SpanView, by_key: Mapping[tuple[str, str], SpanView]) -> SpanView | None:
    """The nearest ancestor whose run a failure under it would explain, or be its own beside."""
    return next((a for a in ancestors(view, by_key) if a.genai or a.failed), None)


def missing_ancestor(view: SpanView, by_key: Mapping[tuple[str, str], SpanView]) -> str:
    """The id of the span's nearest ancestor not in `by_key`; "" when its chain reaches a root."""
    top = [view, *ancestors(view, by_key)][-1]
    return top.parent_id if (top.trace_id, top.parent_id) not in by_key else ""


def is_agent(view: SpanView) -> bool:
    return view.genai and _operation(view) in AGENT_OPERATIONS


def describe(view: SpanView, depth: int = 0) -> dict[str, Any]:
    """The span's failure as a described error (`classifier.described`), its causes nested."""
    exc = view.exception()
    error_type = _text(view.attrs.get("error.type"), 300)
    message = _text(exc.get("exception.message"), 2000) or view.span.status.message
    described: dict[str, Any] = {
        "exception_type": _text(exc.get("exception.type"), 300) or None,
        "message": message or view.span.name,
    }
    status = _status_code(view)
    if error_type.isdigit() and status is None:
        status = int(error_type)
    if status is not None and status >= 400:
        described["status_code"] = status
    grpc = view.attrs.get("rpc.grpc.status_code")
    if isinstance(grpc, int) and 0 < grpc < len(GRPC_NAMES):
        described["grpc_status"] = GRPC_NAMES[grpc]
    headers = {
        name.removeprefix("http.response.header."): _header(view.attrs[name])
        for name in RETRY_AFTER_HEADERS
        if name in view.attrs
    }
    if headers:
        described["headers"] = headers
    if error_type and not error_type.isdigit() and error_type != OTHER_ERROR:
        _read_error_type(error_type, described)
    described["exception_type"] = described["exception_type"] or UNNAMED_SPAN
    cause = _last_cause(view)
    if cause is not None and depth < MAX_DEPTH:
        described["cause"] = describe(cause, depth + 1)
    return {k: v for k, v in described.items() if v is not None}


def _read_error_type(error_type: str, described: dict[str, Any]) -> None:
    """error.type names a category, an exception class or a provider's code."""
    try:
        parse_failure_type(error_type)
    except UnknownFailureType:
        if "." in error_type or error_type.endswith(CLASS_SUFFIXES):
            described["exception_type"] = described["exception_type"] or error_type
        else:
            described["provider_code"] = error_type[:200]
    else:
        described["failure_type"] = error_type


def _status_code(view: SpanView) -> int | None:
    code = view.first(STATUS_CODES)
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    return code if isinstance(code, int) and 0 <= code < 1000 else None


def _header(value: Any) -> str:
    return str(value[0] if isinstance(value, list) and value else value)[:200]


def _last_cause(view: SpanView) -> SpanView | None:
    """The failed descendant that ended last: after local retries, the failure that stood."""
    return max(view.causes, key=lambda c: c.span.end_time_unix_nano, default=None)


def _operation(view: SpanView) -> str:
    named = view.attrs.get("gen_ai.operation.name")
    if named:
        return str(named)
    kind = view.attrs.get("openinference.span.kind") or view.attrs.get("traceloop.span.kind")
    if kind:
        return KIND_OPERATIONS.get(str(kind).lower(), str(kind).lower())
    return view.span.name


def _agent(view: SpanView, by_key: Mapping[tuple[str, str], SpanView]) -> str:
    for candidate in (view, *ancestors(view, by_key)):
        name = candidate.first(AGENT_NAMES)
        if name:
            return str(name)
    return str(view.resource.get("service.name") or UNKNOWN_SERVICE)


def _source(view: SpanView) -> str:
    """The tool, else the model provider, else the server called, else the agent's own."""
    found = view.first(TOOL_NAMES) or view.first(PROVIDER_NAMES) or view.first(SERVER_NAMES)
    if not found and is_agent(view):
        found = view.first(AGENT_NAMES)
    return str(found or view.span.name or UNKNOWN_SERVICE)


def _attempted(view: SpanView, operation: str) -> dict[str, Any]:
    attempted: dict[str, Any] = {"operation": operation, "span": view.span.name}
    tool = view.first(TOOL_NAMES)
    if tool:
        attempted["tool"] = tool
    server = view.first(SERVER_NAMES)
    if server:
        port = view.attrs.get("server.port")
        attempted["server"] = f"{server}:{port}" if port else server
    for name, attr in ATTEMPTED.items():
        if view.attrs.get(attr) not in (None, ""):
            attempted[name] = _clip(view.attrs[attr])
    return attempted


def _usage(view: SpanView) -> dict[str, Any] | None:
    """The span's usage (`RunIn.usage`), None when it names no token count: a count that is not
    a whole number ≥ 0 is left out (the span is still a run)."""
    usage: dict[str, Any] = {}
    for name, attrs in USAGE.items():
        value = view.first(attrs)
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
            usage[name] = value
    if not usage:
        return None
    model = view.first(MODEL_NAMES)
    if isinstance(model, str) and model:
        usage["model"] = model[:200]
    return usage


def _times(span: Span) -> dict[str, Any]:
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    times: dict[str, Any] = {}
    if start:
        times["started_at"] = datetime.fromtimestamp(start / 1e9, UTC)
    if end and end >= start:
        times["finished_at"] = datetime.fromtimestamp(end / 1e9, UTC)
        if start:
            times["duration_ms"] = (end - start) / 1e6
    return times


def _outcome(view: SpanView, classifier: Classifier, source: str) -> dict[str, Any]:
    if not view.failed:
        result = {"span": view.span.name}
        result |= {k: _clip(view.attrs[a]) for k, a in RESULTS.items() if a in view.attrs}
        return {"status": "ok", "results": [result]}
    described = describe(view)
    failure = classify_description(described, classifier=classifier, provider=source)
    return {
        "status": "error",
        "failure_type": _as_sent(described, failure),
        "retryable": failure.retryable,
        "retry_after": failure.retry_after,
        "status_code": failure.status_code or described.get("status_code"),
        "provider_code": failure.provider_code,
        "exception_type": failure.exception_type[:300],
        "signal": failure.signal.value,
        "chain": list(failure.chain),
        "detail": _detail(view, failure),
    }


def _as_sent(described: Mapping[str, Any], failure: Failure) -> str:
    """The category, under the alias error.type named it with when that is what decided."""
    stated = described.get("failure_type")
    if isinstance(stated, str) and parse_failure_type(stated) is failure.category:
        return stated
    return failure.category.value


def _detail(view: SpanView, failure: Failure) -> str:
    detail = failure.detail or view.span.status.message
    stack = view.exception().get("exception.stacktrace")
    if isinstance(stack, str) and stack.strip():
        detail = f"{detail}\n\n{stack.strip()[-STACK_LIMIT:]}"
    return detail


def digest(view: SpanView) -> str:
    """The span as sent: a retry repeats it even if the classification rules changed since."""
    digest = hashlib.sha256(view.span.SerializeToString(deterministic=True))
    digest.update(repr(sorted(view.resource.items())).encode())
    return digest.hexdigest()


def run_of(view: SpanView, by_key: Mapping, classifier: Classifier) -> SpanRun:
    operation = _operation(view)
    source = _source(view)
    item = {
        "agent": _agent(view, by_key)[:100],
        "source": source[:100],
        "operation": operation[:200],
        "attempted": _attempted(view, operation),
        **_outcome(view, classifier, source),
        **_times(view.span),
        "usage": _usage(view),
        "trace_id": view.trace_id,
        "span_id": view.span_id,
        "idempotency_key": f"{KEY_PREFIX}:{view.trace_id}:{view.span_id}",
    }
    item = {k: v for k, v in item.items() if v is not None}
    label = f"span {view.trace_id}/{view.span_id} ({view.span.name[:100]})"
    return SpanRun(replace_nul(item), digest(view), label)
