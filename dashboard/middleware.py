"""The dashboard's middleware (sessions, CSRF, sign-in, messages, clickjacking, htmx, CSP, the
login lock), run for pages only. An API operation (a bearer token, a JSON body, a JSON answer)
needs none of them, and they cost more than the operation's own work on a single report; the
MCP endpoint is mounted outside Django (`config.wsgi`) and passes through none of them anyway.

Each class here is the library's own middleware, subclassed: for a request to the API it hands
the request straight on (`get_response`) and its hooks (`process_view` …) do nothing, so Django's
handler chain is built as usual from `settings.MIDDLEWARE`. The API's own HTML page (its
interactive docs) is a page and keeps them all.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from axes.middleware import AxesMiddleware as _Axes
from csp.middleware import CSPMiddleware as _CSP
from django.contrib.auth.middleware import AuthenticationMiddleware as _Authentication
from django.contrib.messages.middleware import MessageMiddleware as _Messages
from django.contrib.sessions.middleware import SessionMiddleware as _Sessions
from django.http import HttpRequest
from django.middleware.clickjacking import XFrameOptionsMiddleware as _XFrameOptions
from django.middleware.csrf import CsrfViewMiddleware as _Csrf
from django_htmx.middleware import HtmxMiddleware as _Htmx

API_PREFIX = "/api/"
# Under the API's prefix, but pages a browser shows.
API_PAGES = ("/api/v1/docs",)
HOOKS = ("process_view", "process_exception", "process_template_response")

M = TypeVar("M", bound=type)


def serves_pages(request: HttpRequest) -> bool:
    """Whether the request is for a page (anything but an API operation)."""
    path = request.path_info
    return not path.startswith(API_PREFIX) or path.startswith(API_PAGES)


def pages_only(middleware: M) -> M:
    """`middleware`, run for pages only: an API request goes straight on."""

    def __call__(self: Any, request: HttpRequest) -> Any:
        if serves_pages(request):
            return middleware.__call__(self, request)
        return self.get_response(request)

    namespace: dict[str, Any] = {"__call__": __call__, "__doc__": middleware.__doc__}
    for hook in HOOKS:
        if hasattr(middleware, hook):
            namespace[hook] = _for_pages(getattr(middleware, hook))
    return type(middleware.__name__, (middleware,), namespace)  # type: ignore[return-value]


def _for_pages(hook: Callable[..., Any]) -> Callable[..., Any]:
    def for_pages(self: Any, request: HttpRequest, *args: Any) -> Any:
        return hook(self, request, *args) if serves_pages(request) else None

    return for_pages


SessionMiddleware = pages_only(_Sessions)
CsrfViewMiddleware = pages_only(_Csrf)
AuthenticationMiddleware = pages_only(_Authentication)
MessageMiddleware = pages_only(_Messages)
XFrameOptionsMiddleware = pages_only(_XFrameOptions)
HtmxMiddleware = pages_only(_Htmx)
CSPMiddleware = pages_only(_CSP)
AxesMiddleware = pages_only(_Axes)
