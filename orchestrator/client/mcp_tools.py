"""Failsight as MCP tools, for agents that reach their tools through the Model Context Protocol.

The tools are typed functions on the SDK's high-level `MCPServer`, with two backends: the web
server answers them at /mcp with the REST API's own services (`orchestrator.mcp`), and
`failsight-mcp` (`orchestrator.client.mcp_stdio`) answers them over stdio by calling a
Failsight's REST API with `AgentClient`. A tool that fails returns an MCP tool
error (`isError`) whose content is the API's error envelope with MCP's own names for its verdict
(`errorCategory`, `isRetryable`, `retryAfter`), so `classify` reads it back unchanged.

Needs the `mcp` package (`pip install 'failsight-sdk[mcp]'`); nothing here imports Django.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from inspect import signature
from typing import Annotated, Any, Literal, Protocol

from mcp.server.context import ServerRequestContext
from mcp.server.extension import CallNext, Extension
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.utilities.func_metadata import func_metadata
from mcp.types import CallToolRequestParams, CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from classifier import FailureCategory
from classifier.taxonomy import UnknownFailureType, parse_failure_type

SERVER_NAME = "failsight"
INSTRUCTIONS = """\
Failsight routes your subagents' failures. Report each tool call you make as a run (report_run:
start it, then finish it with its outcome envelope). When one fails, ask `decide` what to do:
retry after delay_seconds (refresh true: refresh your credentials first, then retry once; say
can_refresh when you can), wait (the source holds every caller back), switch_source to switch_to
(with escalate true, a person is asked to repair the failing source meanwhile: go on),
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


class Outcome(BaseModel):
    model_config = ConfigDict(extra="forbid")

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
    # As the REST API reads them (`UsageIn`, `CostIn`); the server validates them.
    usage: dict[str, Any] | None = Field(
        None, description="Tokens used and the model: input_tokens, output_tokens, model …"
    )
    cost: dict[str, Any] | float | str | None = Field(
        None, description="What the call cost: {amount, currency} (a bare amount is USD)"
    )


# The tools' argument types, shared by the functions below.
Id = Annotated[int, Field(ge=1)]
OptionalId = Annotated[int | None, Field(ge=1)]
Answer = dict[str, Any]


def _now() -> str:
    return datetime.now(UTC).isoformat()


class Tools:
    """Failsight's tools as typed functions: their signatures are the tools' input schemas (the
    SDK derives and validates them), their docstrings the descriptions. `backend()` is called
    on the SDK's worker thread for each call."""

    def __init__(self, backend: Callable[[], Backend]) -> None:
        self.backend = backend

    def report_run(
        self,
        run_id: Annotated[
            OptionalId, Field(description="Finish this started run with `outcome`")
        ] = None,
        agent: Annotated[str | None, Field(description="Who ran it (to start or report)")] = None,
        source: Annotated[
            str | None, Field(description="Where it got data: web_search, news_api …")
        ] = None,
        operation: Annotated[str | None, Field(description="What it did: search …")] = None,
        attempted: Annotated[
            dict[str, Any] | None, Field(description="What it attempted (the query)")
        ] = None,
        outcome: Annotated[
            Outcome | None,
            Field(
                description="The envelope. Without run_id and outcome the run is reported as "
                "started (running); without run_id, with outcome, as finished in one go"
            ),
        ] = None,
        workflow: Annotated[OptionalId, Field(description="The run's workflow")] = None,
        topic: str | None = None,
        attempt: Annotated[OptionalId, Field(description="1 for a first try, 2 …")] = None,
        retry_of: Annotated[OptionalId, Field(description="The first attempt's id")] = None,
        idempotency_key: Annotated[
            str | None,
            Field(description="The same key again returns the stored run, never a second one"),
        ] = None,
    ) -> Answer:
        """Report a subagent's run: start it (agent, source, operation, attempted) and get its
        id, then finish it (run_id, outcome); or report a finished one at once (outcome, no
        run_id)."""
        operation_name = "tools/call report_run"
        envelope = outcome.model_dump(exclude_none=True) if outcome else None
        if run_id is not None:
            if envelope is None:
                missing = [("outcome", "required")]
                raise refused("A finish needs its outcome.", operation_name, missing)
            return self.backend().finish(run_id, envelope)
        if not agent or not source:
            given = (("agent", agent), ("source", source))
            missing = [(name, "required") for name, value in given if not value]
            raise refused("A new run needs its agent and source.", operation_name, missing)
        named = {
            "operation": operation,
            "attempted": attempted,
            "workflow": workflow,
            "topic": topic,
            "attempt": attempt,
            "retry_of": retry_of,
        }
        fields = {name: value for name, value in named.items() if value is not None}
        if envelope is None:
            envelope, fields["started_at"] = {"status": "running"}, _now()
        return self.backend().report(envelope, agent, source, fields, idempotency_key or "")

    def decide(
        self,
        run_id: Annotated[
            OptionalId, Field(description="A failed run you reported: the decision is kept on it")
        ] = None,
        failure: Annotated[
            dict[str, Any] | None,
            Field(description="Without run_id: the failure (an envelope, or classify's answer)"),
        ] = None,
        source: Annotated[
            str | None, Field(description="Without run_id: the source that failed")
        ] = None,
        attempt: Annotated[Id, Field(description="The attempt that just failed")] = 1,
        workflow: OptionalId = None,
        tried: Annotated[
            list[str] | None, Field(description="Sources already tried: never proposed")
        ] = None,
        can_refresh: Annotated[
            bool, Field(description="You can refresh your own credentials (an auth failure)")
        ] = False,
        alternatives: Annotated[
            list[str] | None,
            Field(description="Without run_id: sources you can call instead, ranked back"),
        ] = None,
    ) -> Answer:
        """What to do after a failure: a failed run's id (the decision is recorded on it, once)
        or a failure and its source. Answers action (retry, wait, switch_source, accept_partial,
        escalate, abort), reason, delay_seconds, switch_to, escalate (a switch_source that also
        asks a person to repair the source; nothing waits for it), and review for an escalation
        or that repair; a retry with refresh true: refresh your credentials, then retry once."""
        body = {"run": run_id, "failure": failure, "attempt": attempt}
        body |= {"source": source, "workflow": workflow, "tried": tried}
        body |= {"can_refresh": can_refresh or None, "alternatives": alternatives}
        return self.backend().decide({k: v for k, v in body.items() if v not in (None, [])})

    def escalate(
        self,
        run_id: Annotated[Id, Field(description="A failed run you reported")],
        reason: Annotated[str, Field(description="What the reviewer should know")],
    ) -> Answer:
        """Send a failed run to human review; answers the review item (its id and page url)."""
        return self.backend().escalate(run_id, reason)

    def wait_for_resolution(
        self,
        review_id: Id,
        timeout_seconds: Annotated[
            float,
            Field(
                ge=0,
                le=LONGEST_WAIT,
                description="Answer as soon as it is resolved, or after this long with its state",
            ),
        ] = LONGEST_WAIT,
    ) -> Answer:
        """Wait (at most 30 s) for an operator to resolve a review item; answers the item with
        state and resolution (action, input, source, note). Call again while it is pending."""
        return self.backend().wait(review_id, timeout_seconds)

    def list_resolutions(self, limit: Annotated[int, Field(ge=1, le=500)] = 50) -> Answer:
        """The resolutions of your review items not acknowledged yet, the earliest first."""
        return self.backend().resolutions(limit)

    def ack(self, review_id: Id) -> Answer:
        """Acknowledge a resolution once you applied it: it is never listed again."""
        return self.backend().ack(review_id)

    def classify(
        self,
        error: Annotated[
            dict[str, Any],
            Field(
                description="An error described as data ({exception_type, message, "
                "status_code, headers, body, cause …}) or an MCP tool result with isError true"
            ),
        ],
        provider: Annotated[
            str | None, Field(description="The provider, so its overrides apply")
        ] = None,
    ) -> Answer:
        """Classify an error (described as data, or an MCP tool result with isError): its
        failure_type, whether a retry can help, and how long to wait."""
        return self.backend().classify(error | ({"provider": provider} if provider else {}))

    def get_policy(
        self,
        failure_type: Annotated[
            str | None, Field(description="Only this failure type's routing (aliases work)")
        ] = None,
    ) -> Answer:
        """The routing policy per failure type (attempts, delays, what happens when exhausted)
        and the provider overrides, with their version."""
        data = self.backend().policies()
        if failure_type is None:
            return data
        try:
            wanted = parse_failure_type(failure_type).value
        except UnknownFailureType as exc:
            errors = [("failure_type", str(exc))]
            raise refused(str(exc), "tools/call get_policy", errors) from None
        return data | {"policies": [p for p in data["policies"] if p["failure_type"] == wanted]}

    def functions(self) -> dict[str, tuple[Callable[..., Answer], bool]]:
        """Each tool's function and whether it only reads."""
        return {
            "report_run": (self.report_run, False),
            "decide": (self.decide, False),
            "escalate": (self.escalate, False),
            "wait_for_resolution": (self.wait_for_resolution, True),
            "list_resolutions": (self.list_resolutions, True),
            "ack": (self.ack, False),
            "classify": (self.classify, True),
            "get_policy": (self.get_policy, True),
        }


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


def answering(name: str, function: Callable[..., Answer]) -> Callable[..., Answer]:
    """`function` as a tool: a ToolFailure it raises is answered as our tool error (the SDK
    would answer its bare text). The signature stays the function's, for the SDK to read."""

    @functools.wraps(function)
    def tool(**arguments: Any) -> Answer | CallToolResult:
        try:
            return function(**arguments)
        except ToolFailure as failure:
            return tool_error(failure.envelope)

    return tool


class ErrorEnvelopes(Extension):
    """Arguments that the SDK refuses (they do not fit the tool's signature) and unknown tools
    are answered as our other tool errors are, with one `{path, message}` per field, instead of
    the SDK's bare text. The SDK's text answer carries no structured content; ours always does."""

    identifier = "io.failsight/error-envelopes"

    def __init__(self, functions: dict[str, Callable[..., Answer]]) -> None:
        self.functions = functions
        self.names = {name: set(signature(f).parameters) for name, f in functions.items()}

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> Any:
        # The SDK ignores an argument the tool does not take: a misspelt `run_id` would start
        # a new run instead of finishing one. Refused, as the REST API refuses unknown fields.
        unknown = sorted(set(params.arguments or {}) - self.names.get(params.name, set()))
        if params.name in self.names and unknown:
            errors = [(name, "not an argument of this tool") for name in unknown]
            operation = f"tools/call {params.name}"
            detail = f"Invalid arguments for {params.name}."
            return tool_error(refused(detail, operation, errors).envelope)
        result = await call_next(ctx)
        sdk_refusal = isinstance(result, CallToolResult) and result.structured_content is None
        if sdk_refusal and result.is_error:
            return tool_error(self.refusal(params).envelope)
        return result

    def refusal(self, params: CallToolRequestParams) -> ToolFailure:
        function = self.functions.get(params.name)
        if function is None:
            known = ", ".join(self.functions)
            return refused(f"No tool {params.name!r}: {known}.", "tools/call", [("name", known)])
        try:
            func_metadata(function).arg_model.model_validate(params.arguments or {})
        except ValidationError as exc:
            return _arguments_refused(params.name, exc)
        # The arguments fit: the tool itself broke (the SDK has logged it).
        return ToolFailure(
            failure_envelope(
                FailureCategory.SERVER_FAULT,
                "Internal error; it has been logged.",
                f"tools/call {params.name}",
                retryable=True,
            )
        )


def build_server(backend: Callable[[], Backend], version: str = "") -> MCPServer:
    """An MCP server of Failsight's tools; `backend()` is called on the SDK's worker thread for
    each call, in the context of the request it serves, and may raise ToolFailure."""
    functions = Tools(backend).functions()
    server = MCPServer(
        SERVER_NAME,
        version=version,
        instructions=INSTRUCTIONS,
        extensions=[ErrorEnvelopes({name: f for name, (f, _) in functions.items()})],
    )
    for name, (function, read_only) in functions.items():
        hints = ToolAnnotations(read_only_hint=read_only, destructive_hint=False)
        server.add_tool(answering(name, function), name=name, annotations=hints)
    return server
