"""The API's Django middleware: the envelope for what Django would answer in HTML (a Host not in
ALLOWED_HOSTS, ninja's plain-text 405) and the body read before the view."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse

from orchestrator.api.bodies import chunked, declared_length, read_body
from orchestrator.api.errors import API_NAMESPACE, ApiError, error_response, invalid
from orchestrator.vocabulary import FailureCategory

security = logging.getLogger("django.security.DisallowedHost")


def host_refusal(request: HttpRequest) -> ApiError | None:
    """The 400 for a Host not in ALLOWED_HOSTS (logged as Django logs it), or None. Agents'
    addresses (/api/, /mcp) answer it in the envelope, never in Django's HTML page."""
    try:
        request.get_host()
    except DisallowedHost as exc:
        security.error(str(exc), extra={"status_code": 400, "request": request})
        alternatives = ["call the server by a name it serves (its ALLOWED_HOSTS)"]
        return ApiError(400, FailureCategory.INVALID_INPUT, str(exc), alternatives=alternatives)
    return None


def api_view(request: HttpRequest) -> bool:
    """Whether the request was routed to one of the API's views (its URL namespace)."""
    match = getattr(request, "resolver_match", None)
    return match is not None and match.namespace == API_NAMESPACE


class MethodNotAllowedMiddleware:
    """Rewrite ninja's plain-text 405 as our envelope, keeping its Allow header."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code != 405
            or not api_view(request)
            or response.get("Content-Type", "").startswith("application/json")
        ):
            return response
        error = invalid(f"{request.method} is not allowed here.", status=405)
        error.headers["Allow"] = response.get("Allow", "")
        return error_response(request, error)


class ApiHostMiddleware:
    """Refuse an /api/ request whose Host is not in ALLOWED_HOSTS with the envelope, before
    Django's CommonMiddleware answers it with an HTML page (hence first in MIDDLEWARE)."""

    PREFIX = "/api/"

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(self.PREFIX):
            refusal = host_refusal(request)
            if refusal is not None:
                return error_response(request, refusal)
        return self.get_response(request)


class RequestBodyMiddleware:
    """Read an /api/ body before the view: ninja looks at `request.body` before it calls the
    parser, so a chunked or cut-off body would otherwise be a 422 "field required"."""

    PREFIX = "/api/"

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(self.PREFIX) and (
            chunked(request) or declared_length(request)
        ):
            try:
                read_body(request)
            except ApiError as error:
                return error_response(request, error)
        return self.get_response(request)
