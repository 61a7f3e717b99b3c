"""Every error the API returns, as one JSON envelope with a taxonomy failure type: the one agents
report their own failures in (docs/api.md, "Errors"), so an agent can feed our answer to its own
classifier unchanged: the envelope, the errors' constructors and the exception handlers. Bodies
are read in `bodies`, the Django middleware is in `middleware`, the web stack in `config.web`."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

import orjson
import pydantic
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DataError, IntegrityError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, AuthorizationError, HttpError, Throttled
from ninja.errors import ValidationError as NinjaValidationError

from orchestrator.refusals import ApiError, FieldError, invalid
from orchestrator.schemas import ErrorOut
from orchestrator.vocabulary import RETRYABLE, FailureCategory

logger = logging.getLogger(__name__)

API_NAMESPACE = "api"

DB_RETRY_AFTER = 5.0


# For the OpenAPI document: what any operation may answer, and one with a JSON body too.
COMMON_ERRORS = (401, 405, 429, 500, 503)
BODY_ERRORS = (400, 408, 411, 413, 415, 422)


def not_found_error(detail: str) -> ApiError:
    return ApiError(404, FailureCategory.RESOURCE_MISSING, detail)


def error_responses(*extra: int, body: bool = False) -> dict[int, type[ErrorOut]]:
    """The `response=` entries documenting our error envelope, for `@router.get(response=…)`."""
    codes = {*COMMON_ERRORS, *(BODY_ERRORS if body else ()), *extra}
    return dict.fromkeys(sorted(codes), ErrorOut)


def envelope(error: ApiError, operation: str) -> dict[str, Any]:
    """The error's JSON body; `operation` is what was attempted ("POST /api/v1/runs")."""
    return {
        "status": "error",
        "failure_type": error.failure_type.value,
        "retryable": error.failure_type in RETRYABLE,
        "retry_after": error.retry_after,
        "detail": error.detail,
        "errors": [e.as_dict() for e in error.errors],
        "attempted": {"operation": operation},
        "partial_results": [],
        "alternatives": error.alternatives,
    }


def envelope_headers(error: ApiError) -> dict[str, str]:
    headers = dict(error.headers)
    if error.retry_after is not None:
        # RFC 9110 delay-seconds is an integer; round up so a client never retries too early.
        headers["Retry-After"] = str(math.ceil(error.retry_after))
    return headers


def error_response(request: HttpRequest, error: ApiError) -> HttpResponse:
    body = envelope(error, f"{request.method} {request.path}")
    response = HttpResponse(
        orjson.dumps(body), status=error.status, content_type="application/json"
    )
    for name, value in envelope_headers(error).items():
        response[name] = value
    return response


def _validation_errors(exc: NinjaValidationError) -> list[FieldError]:
    """Turn ninja's locations ("body", "payload", "runs", 3, "x") into paths ("runs.3.x")."""
    errors = []
    for error in exc.errors:
        loc = list(error.get("loc", ()))
        # body locations carry the view's parameter name after "body"; clients never see it.
        loc = loc[2:] if loc[:1] == ["body"] else loc[1:]
        errors.append(FieldError(".".join(str(part) for part in loc), error.get("msg", "invalid")))
    return errors


def _http_error(exc: HttpError) -> ApiError:
    # ninja wraps whatever the body parser raises into a 400 HttpError: answer the real cause.
    if isinstance(exc.__cause__, ApiError):
        return exc.__cause__
    if exc.status_code == 404:
        return not_found_error(str(exc))
    if exc.status_code in (401, 403):
        return ApiError(exc.status_code, FailureCategory.AUTH_FAILURE, str(exc))
    if exc.status_code >= 500:
        return ApiError(exc.status_code, FailureCategory.SERVER_FAULT, str(exc))
    return invalid(str(exc), status=exc.status_code)


def unauthenticated() -> ApiError:
    return ApiError(
        401,
        FailureCategory.AUTH_FAILURE,
        "Missing, unknown or revoked API token.",
        alternatives=[
            "send the header 'Authorization: Bearer <token>'",
            "ask an operator for a token (manage.py createtoken NAME)",
        ],
        headers={"WWW-Authenticate": 'Bearer realm="api"'},
    )


def throttled(wait: float | None) -> ApiError:
    return ApiError(
        429,
        FailureCategory.RATE_LIMITED,
        f"More than {settings.API_RATE_LIMIT_PER_MINUTE} requests a minute for this token.",
        retry_after=float(wait) if wait is not None else 60.0,
        alternatives=["wait Retry-After seconds", "send runs in batches (POST /runs/batch)"],
    )


def database_unavailable() -> ApiError:
    return ApiError(
        503,
        FailureCategory.SERVER_FAULT,
        "The database is unavailable; nothing was stored.",
        retry_after=DB_RETRY_AFTER,
        alternatives=["retry after Retry-After seconds with the same Idempotency-Key"],
    )


def too_big() -> ApiError:
    limit = settings.API_MAX_BODY_BYTES
    return ApiError(
        413,
        FailureCategory.INVALID_INPUT,
        f"The body is larger than {limit} bytes.",
        alternatives=["split the runs into smaller batches"],
    )


def _pydantic_errors(exc: pydantic.ValidationError) -> list[FieldError]:
    return [FieldError(".".join(map(str, e["loc"])), e["msg"]) for e in exc.errors()]


# What each exception answers, for every way in: the REST API's handlers (`install_handlers`)
# and the MCP tools (`api_error`). The most specific class first: `api_error` takes the first
# match, as ninja picks the handler of the nearest class.
ERRORS: tuple[tuple[type[Exception], Callable[[Any], ApiError]], ...] = (
    (ApiError, lambda exc: exc),
    (NinjaValidationError, lambda exc: invalid("Invalid request.", _validation_errors(exc))),
    (pydantic.ValidationError, lambda exc: invalid("Invalid request.", _pydantic_errors(exc))),
    (AuthenticationError, lambda exc: unauthenticated()),
    (AuthorizationError, lambda exc: ApiError(403, FailureCategory.AUTH_FAILURE, str(exc))),
    (Throttled, lambda exc: throttled(exc.wait)),
    (HttpError, _http_error),
    (Http404, lambda exc: not_found_error("Not found.")),
    (RequestDataTooBig, lambda exc: too_big()),
    (OperationalError, lambda exc: database_unavailable()),
    (InterfaceError, lambda exc: database_unavailable()),
    # Validation should catch every value a column refuses; these are the backstop, never a 500.
    (DataError, lambda exc: invalid("A value does not fit its database column.")),
    (IntegrityError, lambda exc: invalid("The request conflicts with stored data.", (), 409)),
)


def api_error(exc: Exception, where: str) -> ApiError:
    """The error the API answers for `exc`; an unexpected one is logged (`where` says what was
    attempted) and answered as a server fault."""
    for exc_class, make in ERRORS:
        if isinstance(exc, exc_class):
            return make(exc)
    logger.exception("API error on %s", where, exc_info=exc)
    return ApiError(500, FailureCategory.SERVER_FAULT, "Internal error; it has been logged.")


def install_handlers(api: NinjaAPI) -> None:
    """Register the envelope handlers once; they serve every router mounted on `api`."""

    def handle(exc_class: type[Exception], make: Callable[[Any], ApiError]) -> None:
        api.add_exception_handler(
            exc_class, lambda request, exc: error_response(request, make(exc))
        )

    for exc_class, make in ERRORS:
        handle(exc_class, make)
    api.add_exception_handler(
        Exception,
        lambda request, exc: error_response(
            request, api_error(exc, f"{request.method} {request.path}")
        ),
    )


@csrf_exempt
def not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """Catch-all for unknown URLs under the API (instead of Django's HTML 404 page)."""
    return error_response(request, not_found_error(f"No API endpoint at {request.path}."))


Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[Environ, StartResponse], Iterable[bytes]]


def error_answer(
    method: str, path: str, error: ApiError
) -> tuple[int, list[tuple[str, str]], bytes]:
    """The envelope of `error` as the web stack answers it before Django: status, headers, body."""
    body = orjson.dumps(envelope(error, f"{method} {path}"))
    headers = {"Content-Type": "application/json"} | envelope_headers(error)
    return error.status, [*headers.items(), ("Content-Length", str(len(body)))], body


def wsgi_error(environ: Environ, error: ApiError) -> tuple[str, list[tuple[str, str]], bytes]:
    """The envelope of `error` as WSGI middleware answers it, before Django."""
    method, path = environ.get("REQUEST_METHOD", ""), environ.get("PATH_INFO", "")
    status, headers, body = error_answer(method, path, error)
    return f"{status} {HTTPStatus(status).phrase}", headers, body
