"""Failsight as MCP tools, for agents that reach their tools through the Model Context Protocol.

One set of tools with two backends: the web server answers them at /mcp with its own services
(`orchestrator.api.mcp`), and `failsight-mcp` (`orchestrator.client.mcp_stdio`) answers them over
stdio by calling a Failsight's REST API with `AgentClient`. A tool that fails returns an MCP tool
error (`isError`) whose content is the API's error envelope with MCP's own names for its verdict
(`errorCategory`, `isRetryable`, `retryAfter`), so `classify` reads it back unchanged.

Needs the `mcp` package (`pip install 'failsight-sdk[mcp]'`); nothing here imports Django.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

import anyio.to_thread
from mcp.server.lowlevel import Server
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
    ToolAnnotations,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from classifier import FailureCategory
from classifier.taxonomy import UnknownFailureType, parse_failure_type

SERVER_NAME = "failsight"
INSTRUCTIONS = """\
Failsight routes your subagents' failures. Report each tool call you make as a run (report_run:
start it, then finish it with its outcome envelope). When one fails, ask `decide` what to do:
retry after delay_seconds, wait (the source holds every caller back), switch_source to switch_to,
accept_partial, escalate (a human decides: `escalate`, then `wait_for_resolution`, apply the
resolution, then `ack` it) or abort. After a restart, `list_resolutions` gives the resolutions
you have not acknowledged yet. Failure types: transient, rate_limited, auth_failure,
resource_missing, invalid_input, timeout, server_fault, unclassified."""

LONGEST_WAIT = 30.0  # seconds: the REST API's longest long poll (GET /reviews/{id}?wait=)


class ToolFailure(Exception):
    """A tool call failed; `envelope` is the error envelope the REST API answers with."""

    def __init__(self, envelope: dict[str, Any]) -> None:
        super().__init__(envelope.get("detail", ""))
        self.envelope = envelope


def failure_envelope(
    failure_type: FailureCategory,
    detail: str,
    operation: str,
    *,
    retryable: bool = False,
    retry_after: float | None = None,
    errors: Iterable[tuple[str, str]] = (),
    alternatives: Iterable[str] = (),
) -> dict[str, Any]:
    """An error envelope of the API's shape, for failures no server answered."""
    return {
        "status": "error",
        "failure_type": failure_type.value,
        "retryable": retryable,
        "retry_after": retry_after,
        "detail": detail,
        "errors": [{"path": path, "message": message} for path, message in errors],
        "attempted": {"operation": operation},
        "partial_results": [],
        "alternatives": list(alternatives),
    }


def refused(detail: str, operation: str, errors: Iterable[tuple[str, str]]) -> ToolFailure:
    return ToolFailure(
        failure_envelope(
            FailureCategory.INVALID_INPUT,
            detail,
            operation,
            errors=errors,
            alternatives=["fix the arguments as the errors say; repeating them cannot succeed"],
        )
    )


class Backend(Protocol):
    """What the tools ask of Failsight, one method per REST operation they stand for."""

    def report(
        self, envelope: dict[str, Any], agent: str, source: str, fields: dict[str, Any], key: str
    ) -> dict[str, Any]: ...  # POST /runs

    def finish(self, run_id: int, outcome: dict[str, Any]) -> dict[str, Any]: ...  # PATCH

    def decide(self, body: dict[str, Any]) -> dict[str, Any]: ...  # POST /decisions

    def escalate(self, run_id: int, reason: str) -> dict[str, Any]: ...  # POST /reviews

    def wait(self, review_id: int, seconds: float) -> dict[str, Any]: ...  # GET ?wait=

    def resolutions(self, limit: int) -> dict[str, Any]: ...  # GET /reviews?state=resolved…

    def ack(self, review_id: int) -> dict[str, Any]: ...  # POST /reviews/{id}/ack

    def classify(self, body: dict[str, Any]) -> dict[str, Any]: ...  # POST /classify

    def policies(self) -> dict[str, Any]: ...  # GET /policies


class Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Outcome(Args):
    status: Literal["ok", "error"] = Field(
        description="ok: the call answered (zero results is still ok); error: it failed"
    )
    failure_type: str | None = Field(
        None,
        description="With error: transient, rate_limited, auth_failure, resource_missing, "
        "invalid_input, timeout, server_fault or unclassified (aliases such as auth_error work)",
    )
    retryable: bool | None = Field(None, description="false when a retry cannot help")
    retry_after: float | None = Field(None, description="Seconds the provider asked to wait")
    detail: str | None = Field(None, description="The error message, always kept")
    results: list[Any] | None = Field(None, description="With ok: what the call returned")
    partial_results: list[Any] | None = Field(
        None, description="With error: what was gathered before it failed"
    )
    alternatives: list[str] | None = Field(None, description="What could be tried instead")
    attempted: dict[str, Any] | None = Field(None, description="What was attempted (the query)")
    status_code: int | None = Field(None, description="The HTTP status the provider answered")
    provider_code: str | None = Field(None, description="The provider's own error code")
    exception_type: str | None = Field(None, description="The exception's class name")


class ReportRun(Args):
    run_id: int | None = Field(
        None, ge=1, description="Finish this started run with `outcome` (leave out to start one)"
    )
    agent: str | None = Field(None, description="Who ran it (to start or report a run)")
    source: str | None = Field(None, description="Where it got data: web_search, news_api …")
    operation: str | None = Field(None, description="What it did: search, lookup …")
    attempted: dict[str, Any] | None = Field(None, description="What it attempted (the query)")
    outcome: Outcome | None = Field(
        None,
        description="The envelope. Without run_id and outcome the run is reported as started "
        "(running); without run_id, with outcome, as finished in one go",
    )
    workflow: int | None = Field(None, ge=1, description="The workflow the run belongs to")
    topic: str | None = None
    attempt: int | None = Field(None, ge=1, description="1 for a first try, 2 for its retry …")
    retry_of: int | None = Field(None, ge=1, description="The id of the first attempt")
    idempotency_key: str | None = Field(
        None, description="The same key again returns the stored run instead of a second one"
    )


class Decide(Args):
    run_id: int | None = Field(
        None, ge=1, description="A failed run you reported: the decision is recorded on it"
    )
    failure: dict[str, Any] | None = Field(
        None, description="Without run_id: the failure (an envelope, or classify's answer)"
    )
    source: str | None = Field(None, description="Without run_id: the source that failed")
    attempt: int = Field(1, ge=1, description="The attempt that just failed")
    workflow: int | None = Field(None, ge=1)
    tried: list[str] | None = Field(None, description="Sources already tried: never proposed")


class Escalate(Args):
    run_id: int = Field(ge=1, description="A failed run you reported")
    reason: str = Field(description="What the reviewer should know")


class WaitForResolution(Args):
    review_id: int = Field(ge=1)
    timeout_seconds: float = Field(
        LONGEST_WAIT,
        ge=0,
        le=LONGEST_WAIT,
        description="Answer as soon as it is resolved, or after this long with its state then",
    )


class ListResolutions(Args):
    limit: int = Field(50, ge=1, le=500)


class Ack(Args):
    review_id: int = Field(ge=1)


class Classify(Args):
    error: dict[str, Any] = Field(
        description="An error described as data ({exception_type, message, status_code, "
        "headers, body, cause …}) or an MCP tool result with isError true"
    )
    provider: str | None = Field(None, description="The provider, so its overrides apply")


class GetPolicy(Args):
    failure_type: str | None = Field(None, description="Only this failure type's routing")


def _now() -> str:
    return datetime.now(UTC).isoformat()


def report_run(backend: Backend, args: ReportRun) -> dict[str, Any]:
    operation = "tools/call report_run"
    outcome = args.outcome.model_dump(exclude_none=True) if args.outcome else None
    if args.run_id is not None:
        if outcome is None:
            raise refused("A finish needs its outcome.", operation, [("outcome", "required")])
        return backend.finish(args.run_id, outcome)
    missing = [(name, "required") for name in ("agent", "source") if not getattr(args, name)]
    if missing:
        raise refused("A new run needs its agent and source.", operation, missing)
    named = ("operation", "attempted", "workflow", "topic", "attempt", "retry_of")
    fields = {name: value for name in named if (value := getattr(args, name)) is not None}
    if outcome is None:
        outcome, fields["started_at"] = {"status": "running"}, _now()
    assert args.agent and args.source
    return backend.report(outcome, args.agent, args.source, fields, args.idempotency_key or "")


def decide(backend: Backend, args: Decide) -> dict[str, Any]:
    body = {"run": args.run_id, "failure": args.failure, "attempt": args.attempt}
    body |= {"source": args.source, "workflow": args.workflow, "tried": args.tried}
    return backend.decide({name: value for name, value in body.items() if value not in (None, [])})


def get_policy(backend: Backend, args: GetPolicy) -> dict[str, Any]:
    data = backend.policies()
    if args.failure_type is None:
        return data
    try:
        wanted = parse_failure_type(args.failure_type).value
    except UnknownFailureType as exc:
        raise refused(str(exc), "tools/call get_policy", [("failure_type", str(exc))]) from None
    return data | {"policies": [p for p in data["policies"] if p["failure_type"] == wanted]}


@dataclass(frozen=True)
class Spec:
    name: str
    args: type[Args]
    run: Callable[[Backend, Any], dict[str, Any]]
    description: str
    read_only: bool = False

    def tool(self) -> Tool:
        hints = ToolAnnotations(read_only_hint=self.read_only, destructive_hint=False)
        schema = self.args.model_json_schema()
        return Tool(
            name=self.name, description=self.description, input_schema=schema, annotations=hints
        )


SPECS = (
    Spec(
        "report_run",
        ReportRun,
        report_run,
        "Report a subagent's run: start it (agent, source, operation, attempted) and get its id, "
        "then finish it (run_id, outcome); or report a finished one at once (outcome, no run_id).",
    ),
    Spec(
        "decide",
        Decide,
        decide,
        "What to do after a failure: a failed run's id (the decision is recorded on it, once) or "
        "a failure and its source. Answers action (retry, wait, switch_source, accept_partial, "
        "escalate, abort), reason, delay_seconds, switch_to, and review for an escalation.",
    ),
    Spec(
        "escalate",
        Escalate,
        lambda backend, a: backend.escalate(a.run_id, a.reason),
        "Send a failed run to human review; answers the review item (its id and page url).",
    ),
    Spec(
        "wait_for_resolution",
        WaitForResolution,
        lambda backend, a: backend.wait(a.review_id, a.timeout_seconds),
        "Wait (at most 30 s) for an operator to resolve a review item; answers the item with "
        "state and resolution (action, input, source, note). Call again while it is pending.",
        read_only=True,
    ),
    Spec(
        "list_resolutions",
        ListResolutions,
        lambda backend, a: backend.resolutions(a.limit),
        "The resolutions of your review items not acknowledged yet, the earliest first.",
        read_only=True,
    ),
    Spec(
        "ack",
        Ack,
        lambda backend, a: backend.ack(a.review_id),
        "Acknowledge a resolution once you applied it: it is never listed again.",
    ),
    Spec(
        "classify",
        Classify,
        lambda backend, a: backend.classify(
            a.error | ({"provider": a.provider} if a.provider else {})
        ),
        "Classify an error (described as data, or an MCP tool result with isError): its "
        "failure_type, whether a retry can help, and how long to wait.",
        read_only=True,
    ),
    Spec(
        "get_policy",
        GetPolicy,
        get_policy,
        "The routing policy per failure type (attempts, delays, what happens when exhausted) "
        "and the provider overrides, with their version.",
        read_only=True,
    ),
)
TOOLS = {spec.name: spec for spec in SPECS}


def tool_error(envelope: dict[str, Any]) -> CallToolResult:
    """The MCP tool error for an API error envelope."""
    data = envelope | {
        "errorCategory": envelope["failure_type"],
        "isRetryable": envelope["retryable"],
    }
    if envelope.get("retry_after") is not None:
        data["retryAfter"] = envelope["retry_after"]
    return CallToolResult(content=[_text(data)], structured_content=data, is_error=True)


def _text(data: dict[str, Any]) -> TextContent:
    return TextContent(type="text", text=json.dumps(data, ensure_ascii=False, default=str))


def _arguments_refused(name: str, exc: ValidationError) -> ToolFailure:
    errors = [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()]
    return refused(f"Invalid arguments for {name}.", f"tools/call {name}", errors)


def build_server(backend_for: Callable[[Any], Backend], version: str = "") -> Server:
    """An MCP server of Failsight's tools; `backend_for(ctx)` is called on a worker thread for
    each call with the request's context (`ctx.request` is the HTTP request, None over stdio)
    and may raise ToolFailure."""

    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        return ListToolsResult(tools=[spec.tool() for spec in SPECS])

    async def call_tool(ctx: Any, params: CallToolRequestParams) -> CallToolResult:
        spec = TOOLS.get(params.name)
        try:
            if spec is None:
                known = ", ".join(TOOLS)
                raise refused(f"No tool {params.name!r}: {known}.", "tools/call", [("name", known)])
            try:
                args = spec.args.model_validate(params.arguments or {})
            except ValidationError as exc:
                raise _arguments_refused(spec.name, exc) from None
            # The backends block (the database, the REST API): never on the event loop.
            data = await anyio.to_thread.run_sync(lambda: spec.run(backend_for(ctx), args))
        except ToolFailure as failure:
            return tool_error(failure.envelope)
        return CallToolResult(content=[_text(data)], structured_content=data)

    return Server(
        SERVER_NAME,
        version=version,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
