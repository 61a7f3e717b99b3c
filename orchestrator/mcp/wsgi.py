"""/mcp on the WSGI server: the MCP endpoint's ASGI app (`orchestrator.mcp.app`) through a2wsgi,
which runs it on an event loop of its own (a thread of this process), and `mounted`, the seam
that routes /mcp to it."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from a2wsgi import ASGIMiddleware

from orchestrator.api.errors import Environ, StartResponse, WsgiApp
from orchestrator.mcp.app import PATH, asgi_app


class McpApp:
    """WSGI: the MCP endpoint, made on first use (a2wsgi starts its loop's thread then)."""

    def __init__(self) -> None:
        self._wsgi: WsgiApp | None = None
        self._lock = threading.Lock()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        # Read whole here: the answer is one JSON document, and the caller (the admission)
        # holds the request's work slot until the app has answered.
        return list(self.wsgi()(environ, start_response))

    def wsgi(self) -> WsgiApp:
        with self._lock:
            if self._wsgi is None:
                self._wsgi = ASGIMiddleware(asgi_app())  # type: ignore[arg-type]
            return self._wsgi


def mounted(app: WsgiApp, mcp: WsgiApp) -> WsgiApp:
    """`app`, with `mcp` answering PATH."""

    def wsgi(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == PATH or path.startswith(PATH + "/"):
            return mcp(environ, start_response)
        return app(environ, start_response)

    return wsgi
