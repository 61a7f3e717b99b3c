"""Every error the API returns, as one JSON envelope with a taxonomy failure type: the one agents
report their own failures in (docs/api.md, "Errors"), so an agent can feed our answer to its own
classifier unchanged. Body reading and the JSON parser live here because their refusals are
errors of this shape."""

from __future__ import annotations

import io
import json
import logging
import math
import re
from collections.abc import Callable, Iterable
from http import HTTPStatus
from typing import Any

import orjson
import pydantic
from django.conf import settings
from django.core.exceptions import DisallowedHost, RequestDataTooBig
from django.db import DataError, IntegrityError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, AuthorizationError, HttpError, Throttled
from ninja.errors import ValidationError as NinjaValidationError
from ninja.parser import Parser

from orchestrator.ingest.bounds import replace_nul
from orchestrator.refusals import ApiError, FieldError, invalid
from orchestrator.schemas import ErrorOut
from orchestrator.vocabulary import RETRYABLE, FailureCategory

logger = logging.getLogger(__name__)

API_NAMESPACE = "api"

DB_RETRY_AFTER = 5.0


# For the OpenAPI document: what any operation may answer, and one with a JSON body too.
COMMON_ERRORS = (401, 405, 429, 500, 503)
BODY_ERRORS = (400, 411, 413, 415, 422)


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


def _too_big() -> ApiError:
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
    (RequestDataTooBig, lambda exc: _too_big()),
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


_NUL_ESCAPE = b"\\u0000"
_ORJSON_DEPTH = "depth limit exceeded"  # orjson refuses nesting beyond 1,024 levels itself
_ORJSON_HUGE = "number is infinity"  # a number of more than ~308 digits


def deeper_than(value: Any, limit: int) -> bool:
    return json_shape(value, limit)[0]


# orjson reads an integer beyond 64 bits as the nearest float: any float this far from zero
# may be one (or a float the client sent, which the exact check then leaves alone).
_ROUNDED = float(2**63)


def json_shape(value: Any, limit: int) -> tuple[bool, bool]:
    """(nests containers more than `limit` levels deep, holds a float that may be a rounded
    integer), level by level: no recursion to exhaust."""
    level = [value] if type(value) in (dict, list) else []
    rounded = type(value) is float and not -_ROUNDED < value < _ROUNDED
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True, rounded
        deeper: list[Any] = []
        push = deeper.append
        for container in level:
            for child in container.values() if type(container) is dict else container:
                kind = type(child)
                if kind is dict or kind is list:
                    push(child)
                elif kind is float and not -_ROUNDED < child < _ROUNDED:
                    rounded = True
        level = deeper
    return False, rounded


def _too_wide(path: str) -> ApiError:
    message = f"integer outside {INT_RANGE[0]}..{INT_RANGE[1]}: send it as a string"
    return invalid("An integer is too wide to keep exactly.", [FieldError(path, message)])


def _too_deep(limit: int) -> ApiError:
    return invalid(f"The JSON nests deeper than {limit} levels.", [FieldError("", "too deep")])


_LONG_NUMBER = re.compile(rb"\d{19,}")
INT_RANGE = (-(2**63), 2**64 - 1)
_READ_PIECE = 64 * 1024


def _chunked(request: HttpRequest) -> bool:
    encoding = request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
    return "chunked" in encoding


def _declared_length(request: HttpRequest) -> int | None:
    declared = request.META.get("CONTENT_LENGTH", "")
    return int(declared) if declared.isdigit() else None


def read_body(request: HttpRequest) -> bytes:
    """The request body, at most API_MAX_BODY_BYTES, and whole: the web server ends the stream
    early, without an error, when the client stops sending. A body still chunked here is one the
    server did not end (Django's development server cannot tell where it ends): 411."""
    if _chunked(request):
        raise ApiError(
            411,
            FailureCategory.INVALID_INPUT,
            "A chunked body cannot be read here; send it with a Content-Length header.",
            alternatives=["send the body with Content-Length instead of Transfer-Encoding"],
        )
    try:
        body = request.body
    except RequestDataTooBig:
        raise _too_big() from None
    if len(body) > settings.API_MAX_BODY_BYTES:
        raise _too_big()
    declared = _declared_length(request)
    if declared is not None and len(body) < declared:
        raise invalid(
            f"The body ended after {len(body)} of the {declared} bytes its Content-Length"
            " declares.",
            status=400,
        )
    return body


Environ = dict[str, Any]
StartResponse = Callable[..., Any]
WsgiApp = Callable[[Environ, StartResponse], Iterable[bytes]]


def wsgi_error(environ: Environ, error: ApiError) -> tuple[str, list[tuple[str, str]], bytes]:
    """The envelope of `error` as WSGI middleware answers it, before Django."""
    operation = f"{environ.get('REQUEST_METHOD')} {environ.get('PATH_INFO', '')}"
    body = orjson.dumps(envelope(error, operation))
    headers = {"Content-Type": "application/json"} | envelope_headers(error)
    status = f"{error.status} {HTTPStatus(error.status).phrase}"
    return status, [*headers.items(), ("Content-Length", str(len(body)))], body


class ChunkedBodies:
    """WSGI middleware: a chunked API body the server ended (`wsgi.input_terminated`) is read and
    handed on with its length, as Django reads a body by its Content-Length only."""

    def __init__(self, app: WsgiApp) -> None:
        self.app = app

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if (
            "chunked" in environ.get("HTTP_TRANSFER_ENCODING", "").lower()
            and environ.get("wsgi.input_terminated")
            and environ.get("PATH_INFO", "").startswith("/api/")
        ):
            try:
                body = self.read(environ["wsgi.input"])
            except ApiError as error:
                status, headers, answer = wsgi_error(environ, error)
                start_response(status, headers)
                return [answer]
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
            del environ["HTTP_TRANSFER_ENCODING"]
        return self.app(environ, start_response)

    @staticmethod
    def read(stream: Any) -> bytes:
        limit = settings.API_MAX_BODY_BYTES
        pieces, size = [], 0
        while True:
            try:
                piece = stream.read(_READ_PIECE)
            except Exception:  # the server's decoder refused the chunks
                logger.info("malformed chunked body", exc_info=True)
                raise invalid("The chunked body is malformed.", status=400) from None
            if not piece:
                break
            size += len(piece)
            if size > limit:
                raise _too_big()  # stop reading: the rest never reaches memory
            pieces.append(piece)
        if not size:  # what granian's input yields for a chunk framing it could not read
            detail = "The chunked body is empty or its chunk framing is malformed."
            raise invalid(detail, status=400)
        return b"".join(pieces)


class ApiHostMiddleware:
    """Refuse an /api/ request whose Host is not in ALLOWED_HOSTS with the envelope, before
    Django's CommonMiddleware answers it with an HTML page (hence first in MIDDLEWARE)."""

    PREFIX = "/api/"
    security = logging.getLogger("django.security.DisallowedHost")

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(self.PREFIX):
            error = host_refusal(request)
            if error is not None:
                return error_response(request, error)
        return self.get_response(request)


def host_refusal(request: HttpRequest) -> ApiError | None:
    """The 400 for a request whose Host is not in ALLOWED_HOSTS (logged as Django logs it), or
    None."""
    try:
        request.get_host()
    except DisallowedHost as exc:
        ApiHostMiddleware.security.error(str(exc), extra={"status_code": 400, "request": request})
        return ApiError(
            400,
            FailureCategory.INVALID_INPUT,
            str(exc),
            alternatives=["call the server by a name it serves (its ALLOWED_HOSTS)"],
        )
    return None


class RequestBodyMiddleware:
    """Read an /api/ body before the view: ninja looks at `request.body` before it calls the
    parser, so a chunked or cut-off body would otherwise be a 422 "field required"."""

    PREFIX = "/api/"

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.startswith(self.PREFIX) and (
            _chunked(request) or _declared_length(request)
        ):
            try:
                read_body(request)
            except ApiError as error:
                return error_response(request, error)
        return self.get_response(request)


def _wide_integer(body: bytes) -> str | None:
    """The path of the first integer outside 64 bits, read again with the standard library
    (which keeps integers exact), or None."""
    if not _LONG_NUMBER.search(body):
        return None
    try:
        data = json.loads(body)
    except ValueError:  # more digits than Python converts: certainly too wide
        return ""
    level: list[tuple[str, Any]] = [("", data)]
    while level:
        nxt = []
        for path, value in level:
            if type(value) is int and not INT_RANGE[0] <= value <= INT_RANGE[1]:
                return path
            if type(value) is dict:
                children = list(value.items())
            elif type(value) is list:
                children = list(enumerate(value))
            else:
                continue
            nxt += [(f"{path}.{key}" if path else str(key), child) for key, child in children]
        level = nxt
    return None


class EnvelopeParser(Parser):
    """ninja's body parser, made safe: size, depth, strict JSON, integers kept exact (a wider one
    is a 422, never stored rounded), and U+0000, which PostgreSQL refuses in text, replaced by
    U+FFFD rather than refusing a failure report whose exception message carried one."""

    def parse_body(self, request: HttpRequest) -> Any:
        if not is_json(request.content_type):
            raise not_json(request.content_type)
        data = parse_json(read_body(request))
        request.parsed_json = data  # type: ignore[attr-defined]  # read back by `parsed`
        return data

    @staticmethod
    def parsed(request: HttpRequest) -> Any:
        """The body as this parser returned it (views hash it for idempotency)."""
        return getattr(request, "parsed_json", None)


def is_json(content_type: str | None) -> bool:
    """Whether a Content-Type names JSON: application/json, or a `+json` type (RFC 6839)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def not_json(content_type: str | None) -> ApiError:
    """A body sent as anything but JSON: refused, never guessed at (text/plain is not parsed)."""
    return ApiError(
        415,
        FailureCategory.INVALID_INPUT,
        f"Content-Type {content_type or '(none)'!r} is not JSON: send application/json.",
        alternatives=["send the body as JSON with Content-Type: application/json"],
    )


def parse_json(body: bytes) -> Any:
    """A request body as data, by the rules of `EnvelopeParser`; raise ApiError otherwise."""
    limit = settings.API_MAX_JSON_DEPTH
    try:
        # orjson is strict: no NaN/Infinity, no lone surrogates (which no database accepts).
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith(_ORJSON_DEPTH):
            raise _too_deep(limit) from None
        if _ORJSON_HUGE in str(exc) and (wide := _wide_integer(body)) is not None:
            raise _too_wide(wide) from None  # valid JSON, a number beyond any double
        raise invalid(f"The body is not valid JSON: {exc}", status=400) from None
    too_deep, rounded = json_shape(data, limit)
    if too_deep:
        raise _too_deep(limit)
    wide = _wide_integer(body) if rounded else None
    if wide is not None:
        raise _too_wide(wide)
    if _NUL_ESCAPE in body:
        data = replace_nul(data)
    return data
