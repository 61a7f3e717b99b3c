"""The WSGI app: Django, and the MCP endpoint at /mcp (an ASGI app through a2wsgi,
`orchestrator.mcp`). The server as shipped runs it behind `config.web` (bodies, probes,
admission); `manage.py runserver` serves it as it is."""

import gc
import os
from collections.abc import Iterable

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_application = get_wsgi_application()


from orchestrator.api.errors import Environ, StartResponse, WsgiApp  # noqa: E402
from orchestrator.mcp.wsgi import McpApp, mounted  # noqa: E402

# PEP 3333's CGI names: any other name of the process's environment in a request's environ
# came from the process, not the request.
CGI_NAMES = frozenset(
    [
        "REQUEST_METHOD",
        "SCRIPT_NAME",
        "PATH_INFO",
        "QUERY_STRING",
        "CONTENT_TYPE",
        "CONTENT_LENGTH",
        "SERVER_NAME",
        "SERVER_PORT",
        "SERVER_PROTOCOL",
        "REMOTE_ADDR",
        "REMOTE_HOST",
        "GATEWAY_INTERFACE",
        "SERVER_SOFTWARE",
    ]
)


def without_process_environment(app: WsgiApp) -> WsgiApp:
    """granian copies the process's environment (SECRET_KEY, DATABASE_URL …) into each request's
    environ, which request.META would carry into error reports and debug pages."""
    inherited = frozenset(os.environ) - CGI_NAMES

    def wsgi(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        for name in inherited.intersection(environ):
            if not name.startswith("HTTP_"):
                del environ[name]
        return app(environ, start_response)

    return wsgi


def settle_heap() -> None:
    """Load what every request needs (the URLconf imports every view and the API), then move
    the objects alive now (Django, the apps, their libraries: long-lived) out of the cyclic
    garbage collector's reach with `gc.freeze()`. Its full collections then look at what the
    requests made, not at the whole process again and again: a 1,000-run batch's parsed models
    and dicts set off several, and the CPU a batch costs drops by about a quarter (docs/
    benchmarks.md, ingest). Objects made later are collected as before."""
    get_resolver().url_patterns  # noqa: B018  # imports config.urls and all it names
    gc.collect()  # what start-up left unreachable goes now, not into the frozen set
    gc.freeze()


application = without_process_environment(mounted(django_application, McpApp()))
settle_heap()
