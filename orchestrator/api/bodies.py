"""Request bodies under the API: read (`read_body`) and parsed (`EnvelopeParser`, `parse_json`) by
the rules every operation shares, each refusal an `ApiError` in the envelope. The web server as
shipped has read the body whole before Django sees it (`config.web`); these rules apply to what
it handed on."""

from __future__ import annotations

import json
import re
from typing import Any

import orjson
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from ninja.parser import Parser

from orchestrator.api.errors import too_big
from orchestrator.ingest.bounds import replace_nul
from orchestrator.refusals import ApiError, FieldError, invalid
from orchestrator.vocabulary import FailureCategory

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


def chunked(request: HttpRequest) -> bool:
    encoding = request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
    return "chunked" in encoding


def declared_length(request: HttpRequest) -> int | None:
    declared = request.META.get("CONTENT_LENGTH", "")
    return int(declared) if declared.isdigit() else None


def read_body(request: HttpRequest) -> bytes:
    """The request body, at most API_MAX_BODY_BYTES, and whole: the web server ends the stream
    early, without an error, when the client stops sending. A body still chunked here is one the
    server did not end (Django's development server cannot tell where it ends): 411."""
    if chunked(request):
        raise ApiError(
            411,
            FailureCategory.INVALID_INPUT,
            "A chunked body cannot be read here; send it with a Content-Length header.",
            alternatives=["send the body with Content-Length instead of Transfer-Encoding"],
        )
    try:
        body = request.body
    except RequestDataTooBig:
        raise too_big() from None
    if len(body) > settings.API_MAX_BODY_BYTES:
        raise too_big()
    declared = declared_length(request)
    if declared is not None and len(body) < declared:
        raise invalid(
            f"The body ended after {len(body)} of the {declared} bytes its Content-Length"
            " declares.",
            status=400,
        )
    return body


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
