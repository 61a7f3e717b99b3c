"""Failsight's MCP tools (`orchestrator.client.mcp_tools`) at /mcp: the MCP SDK's streamable HTTP
app, stateless and answering in JSON, served by the same WSGI server through a2wsgi. Before the
request reaches it, the Host is checked against ALLOWED_HOSTS and the bearer token and the rate
limit are the REST API's, each refusal in the API's error envelope. A tool calls the API's own
operations in this process, with the token as `request.auth`: the same validation, rules and
errors as the REST API, and no HTTP to ourselves.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pydantic
from a2wsgi import ASGIMiddleware
from django.core import signals
from django.core.handlers.wsgi import WSGIRequest
from django.db import (
    DataError,
    IntegrityError,
    InterfaceError,
    OperationalError,
)
from mcp.server.transport_security import TransportSecuritySettings
from ninja import Schema

from orchestrator.api import decisions, ingest, policies, reviews, runs
from orchestrator.api.auth import BearerToken, TokenRateThrottle
from orchestrator.api.bodies import parse_json
from orchestrator.api.errors import (
    ApiError,
    Environ,
    FieldError,
    StartResponse,
    WsgiApp,
    database_unavailable,
    envelope,
    invalid,
    throttled,
    unauthenticated,
    wsgi_error,
)
from orchestrator.api.middleware import host_refusal
from orchestrator.api.schemas import (
    ClassificationOut,
    ClassifyIn,
    DecisionIn,
    DecisionOut,
    PoliciesOut,
    ReviewFilters,
    ReviewIn,
    ReviewListOut,
    ReviewOut,
    ReviewWait,
    RunFinishIn,
    RunIn,
    RunOut,
)
from orchestrator.client import report_body
from orchestrator.client.mcp_tools import ToolFailure, build_server
from orchestrator.models import ApiToken, ReviewItem
from orchestrator.vocabulary import FailureCategory

logger = logging.getLogger(__name__)

PATH = "/mcp"
TOKEN = "failsight.mcp.token"  # the environ key of the caller's ApiToken, once authenticated


class InProcess:
    """The tools' backend as the REST API's operations, called in this process for the token of
    the MCP request whose WSGI environ this is."""

    def __init__(self, environ: Environ) -> None:
        token = environ.get(TOKEN)
        if not isinstance(token, ApiToken):  # never reached: McpApp authenticates first
            raise ToolFailure(envelope(unauthenticated(), "tools/call"))
        self.request = WSGIRequest(environ)
        self.request.auth = token  # type: ignore[attr-defined]  # as ninja sets it

    def report(
        self, outcome: dict[str, Any], agent: str, source: str, fields: dict[str, Any], key: str
    ) -> dict[str, Any]:
        def reported() -> Any:
            raw = _as_posted(report_body(outcome, agent=agent, source=source, **fields))
            run, _ = ingest.ingest_one(self.request.auth.pk, RunIn.model_validate(raw), raw, key)
            return run

        return self._call("report_run", RunOut, reported)

    def finish(self, run_id: int, outcome: dict[str, Any]) -> dict[str, Any]:
        return self._call(
            "report_run",
            RunOut,
            lambda: runs.finish_run(self.request, run_id, _posted(RunFinishIn, outcome)),
        )

    def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(
            "decide", DecisionOut, lambda: decisions.decide(self.request, _posted(DecisionIn, body))
        )

    def escalate(self, run_id: int, reason: str) -> dict[str, Any]:
        body = {"run": run_id, "reason": reason}
        return self._call(
            "escalate",
            reviews.ReviewCreatedOut,
            lambda: reviews.escalate(self.request, _posted(ReviewIn, body)).value,
        )

    def wait(self, review_id: int, seconds: float) -> dict[str, Any]:
        params = ReviewWait(wait=seconds)
        return self._call(
            "wait_for_resolution",
            ReviewOut,
            lambda: reviews.get_review(self.request, review_id, params),
        )

    def resolutions(self, limit: int) -> dict[str, Any]:
        filters = ReviewFilters(state=ReviewItem.State.RESOLVED, delivered=False, limit=limit)
        return self._call(
            "list_resolutions", ReviewListOut, lambda: reviews.list_reviews(self.request, filters)
        )

    def ack(self, review_id: int) -> dict[str, Any]:
        return self._call("ack", ReviewOut, lambda: reviews.acknowledge(self.request, review_id))

    def classify(self, body: dict[str, Any]) -> dict[str, Any]:
        def classified() -> Any:
            raw = _as_posted(body)
            # What EnvelopeParser keeps of a body: /classify reads an MCP result from it as sent.
            self.request.parsed_json = raw  # type: ignore[attr-defined]
            return decisions.classify(self.request, ClassifyIn.model_validate(raw))

        return self._call("classify", ClassificationOut, classified)

    def policies(self) -> dict[str, Any]:
        return self._call(
            "get_policy", PoliciesOut, lambda: policies.current_policies(self.request)
        )

    def _call(self, tool: str, out: type[Schema], operation: Callable[[], Any]) -> dict[str, Any]:
        """The operation's answer through its response schema, as JSON data; its error as the
        envelope the REST API answers."""
        with as_request(self.request.environ):
            try:
                return out.model_validate(operation()).model_dump(mode="json")
            except Exception as exc:
                raise ToolFailure(envelope(_api_error(exc), f"tools/call {tool}")) from None


@contextmanager
def as_request(environ: Environ) -> Iterator[None]:
    """Django's request signals around work done outside its handler, so that database
    connections are checked and given back as around any request."""
    signals.request_started.send(sender=McpApp, environ=environ)
    try:
        yield
    finally:
        signals.request_finished.send(sender=McpApp)


def _posted(schema: type[pydantic.BaseModel], data: dict[str, Any]) -> Any:
    return schema.model_validate(_as_posted(data))


def _as_posted(data: dict[str, Any]) -> Any:
    """`data` as the API reads a body: the same limits on depth and integers, U+0000 replaced."""
    return parse_json(json.dumps(data).encode())


def _api_error(exc: Exception) -> ApiError:
    """The error the API's exception handlers (`errors.install_handlers`) answer for `exc`."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, pydantic.ValidationError):
        errors = [FieldError(".".join(map(str, e["loc"])), e["msg"]) for e in exc.errors()]
        return invalid("Invalid request.", errors)
    if isinstance(exc, OperationalError | InterfaceError):
        return database_unavailable()
    if isinstance(exc, DataError):
        return invalid("A value does not fit its database column.")
    if isinstance(exc, IntegrityError):
        return invalid("The request conflicts with stored data.", (), 409)
    logger.exception("MCP tool error", exc_info=exc)
    return ApiError(500, FailureCategory.SERVER_FAULT, "Internal error; it has been logged.")


def _backend(ctx: Any) -> InProcess:
    return InProcess(ctx.request.scope["wsgi_environ"])  # a2wsgi's scope carries the environ


class McpApp:
    """WSGI: the MCP endpoint, behind the REST API's host check, bearer token and rate limit.
    The MCP app and the event loop it runs on (a thread of this process) start on first use."""

    def __init__(self) -> None:
        self._asgi: WsgiApp | None = None
        self._lock = threading.Lock()
        self.throttle = TokenRateThrottle()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        refusal = self.refusal(environ)
        if refusal is not None:
            status, headers, body = wsgi_error(environ, refusal)
            start_response(status, headers)
            return [body]
        # Read whole here: the answer is one JSON document, and the caller (the admission)
        # holds the request's work slot until the app has answered.
        return list(self.asgi()(environ, start_response))

    def refusal(self, environ: Environ) -> ApiError | None:
        request = WSGIRequest(environ)
        refusal = host_refusal(request)
        if refusal is not None:
            return refusal
        with as_request(environ):
            try:
                token = BearerToken()(request)
            except (OperationalError, InterfaceError):
                return database_unavailable()
        if token is None:
            return unauthenticated()
        request.auth = token  # type: ignore[attr-defined]  # read by the throttle
        if not self.throttle.allow_request(request):
            return throttled(self.throttle.wait())
        environ[TOKEN] = token
        return None

    def asgi(self) -> WsgiApp:
        with self._lock:
            if self._asgi is None:
                self._asgi = _start()
            return self._asgi


def _start() -> WsgiApp:
    from django.conf import settings

    server = build_server(_backend)
    app = server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        json_response=True,
        max_request_body_size=settings.API_MAX_BODY_BYTES,
        # The host was checked against ALLOWED_HOSTS already, and a request without our bearer
        # token is refused before the app: a page another site serves cannot send one.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="mcp", daemon=True).start()
    started = threading.Event()

    async def run() -> None:
        async with server.session_manager.run():
            started.set()
            await asyncio.Event().wait()  # for the life of the process

    asyncio.run_coroutine_threadsafe(run(), loop)
    if not started.wait(10):
        raise RuntimeError("the MCP session manager did not start")
    return ASGIMiddleware(app, loop=loop)


def mounted(app: WsgiApp, mcp: WsgiApp) -> WsgiApp:
    """`app`, with `mcp` answering PATH."""

    def wsgi(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == PATH or path.startswith(PATH + "/"):
            return mcp(environ, start_response)
        return app(environ, start_response)

    return wsgi
