"""Pages while the database is down: a plain 503 with Retry-After instead of a 500 (the base
template could not be rendered: it reads the signed-in user). The API has its own envelope."""

from __future__ import annotations

import math
from collections.abc import Callable

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse

from orchestrator.api.errors import DB_RETRY_AFTER

PAGE = (
    "<!doctype html><html lang=en><meta charset=utf-8><title>Failsight: unavailable</title>"
    "<h1>The database is unavailable</h1><p>Nothing was changed. This page will work again "
    "once the database is back; try again in a few seconds.</p></html>"
)


class DatabaseUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, OperationalError | InterfaceError):
            return None
        response = HttpResponse(PAGE, status=503, content_type="text/html; charset=utf-8")
        response["Retry-After"] = str(math.ceil(DB_RETRY_AFTER))
        return response
