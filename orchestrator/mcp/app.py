"""The MCP endpoint as an ASGI app: the SDK's streamable HTTP app (`MCPServer.
streamable_http_app`, stateless and answering in JSON) behind the REST API's own admission of
agents (`auth.admitted`: the Host, the bearer token, the rate limit), each refusal in the API's
error envelope. An ASGI server mounts `asgi_app()` at PATH; the WSGI server mounts it through
a2wsgi (`orchestrator.mcp.wsgi`).

Stateless, every request stands alone: no session to pin to a process, no event stream held
open. The SDK's session manager still runs each request in its task group, which its `run()`
holds open: the app enters it on its first request (or at an ASGI server's lifespan startup) on
the loop that serves it, and leaves it at lifespan shutdown."""

from __future__ import annotations

import asyncio
import io
import logging

import anyio
import anyio.to_thread
import orjson
from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from orchestrator.api.auth import TokenRateThrottle, admitted
from orchestrator.api.errors import ApiError, api_error, envelope, envelope_headers
from orchestrator.client.mcp_tools import build_server
from orchestrator.mcp.services import CALLER, Caller, caller_backend, database_work
from orchestrator.models import ApiToken

logger = logging.getLogger(__name__)

PATH = "/mcp"


def asgi_app() -> Endpoint:
    """A new MCP endpoint: its own server, session manager and rate-limit counter."""
    server = build_server(caller_backend)
    app = server.streamable_http_app(
        streamable_http_path=PATH,
        stateless_http=True,
        json_response=True,
        max_request_body_size=settings.API_MAX_BODY_BYTES,
        # The Host was checked against ALLOWED_HOSTS already, and a request without our bearer
        # token is refused before the app: a page another site serves cannot send one.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return Endpoint(app, server.session_manager)


class Endpoint:
    """ASGI: agents admitted as by the REST API, then the MCP app with the caller in context."""

    def __init__(self, app: ASGIApp, sessions: StreamableHTTPSessionManager) -> None:
        self.app = app
        self.sessions = sessions
        self.throttle = TokenRateThrottle()
        self._started: anyio.Event | None = None
        self._running: asyncio.Task[None] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # no WebSocket here: the server closes the connection unanswered
        # Django's own view of this request, for its Host and Authorization rules; the body
        # stays with the MCP app.
        request = ASGIRequest(scope, io.BytesIO())
        admission = await anyio.to_thread.run_sync(self.admit, request)
        if isinstance(admission, ApiError):
            await refuse(request, admission)(scope, receive, send)
            return
        # Under the WSGI mount a2wsgi hands the WSGI environ on in the scope: the admission's
        # work slot, which a long poll gives back while it waits.
        caller = Caller(admission, request.build_absolute_uri, scope.get("wsgi_environ", {}))
        await self.started()
        reset = CALLER.set(caller)
        try:
            await self.app(scope, receive, send)
        finally:
            CALLER.reset(reset)

    def admit(self, request: ASGIRequest) -> ApiToken | ApiError:
        with database_work():
            try:
                return admitted(request, self.throttle)
            except Exception as exc:
                return api_error(exc, f"{request.method} {request.path}")

    async def started(self) -> None:
        """Enter the session manager's `run()` once, on the loop serving this endpoint."""
        if self._started is None:
            self._started = anyio.Event()
            self._running = asyncio.get_running_loop().create_task(self._run())
        await self._started.wait()

    async def _run(self) -> None:
        assert self._started is not None
        async with self.sessions.run():
            self._started.set()
            await anyio.sleep_forever()

    async def lifespan(self, receive: Receive, send: Send) -> None:
        """The ASGI lifespan protocol: start the session manager with the server, stop it
        with it."""
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.started()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._running is not None:
                    self._running.cancel()
                await send({"type": "lifespan.shutdown.complete"})
                return


def refuse(request: ASGIRequest, error: ApiError) -> Response:
    body = envelope(error, f"{request.method} {request.path}")
    return Response(
        orjson.dumps(body),
        status_code=error.status,
        headers=envelope_headers(error),
        media_type="application/json",
    )
