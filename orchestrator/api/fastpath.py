"""The single-report fast path: `POST /api/v1/runs` answered without Django's handler.

Most agents report one run per request, so this one operation carries most of the API's traffic,
and through Django it paid for a whole page's machinery: eleven middleware (sessions, CSRF,
messages, sign-in lockout …), URL resolution and ninja's operation around a view whose own work
is a parse, a validation and one INSERT. `FastReports` wraps the WSGI application
(`config.wsgi`, after `Shedding`) and serves an ordinary report itself, with the same parts the
view uses: the bearer token (`ApiToken.objects.authenticate_cached`), the per-token rate limit
(`TokenRateThrottle`), the body parser's rules (`parse_json`), `RunIn`, `ingest.ingest_one`
(group commit) and `RunOut`; its answer carries the headers the middleware would add
(`X-Policy-Version`, the security headers and the Content-Security-Policy).

Anything out of the ordinary is handed to Django untouched (the body put back), so every refusal
keeps the one implementation of its envelope: a missing or revoked token, a request over the
rate limit, a body that is not a valid run, a host not in ALLOWED_HOSTS, a request the HTTPS
redirect applies to, a chunked body. A report refused after it reached the store (a reused
Idempotency-Key, a value the column refuses) stored nothing, so Django judging it again gives
the same answer. A database outage is answered here (503 in the envelope, as the API answers
it), never handed on: the report may or may not have been stored, and the client's retry with
its Idempotency-Key settles which.

A thread keeps its database connection between fast reports (Django's handler would return it
to the pool after each request, and take it back with a health check before the next); any
error on it closes it, and a request of Django's on the same thread closes it at its start as
usual. A thread that ends with its connection kept gives it back when the next thread keeps
one (`keep_connection`): under a server that starts a thread per request, as `runserver` does,
every report would otherwise hold a pool slot for good, and the eleventh report waited for a
connection in vain. `INGEST_FAST_PATH = False` sends every report through Django.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import typing
from collections.abc import Callable, Iterable
from datetime import datetime
from functools import cache
from operator import attrgetter, itemgetter
from typing import Any

import orjson
import pydantic
from django.conf import settings
from django.core.exceptions import DisallowedHost
from django.core.handlers.wsgi import WSGIRequest
from django.core.serializers.json import DjangoJSONEncoder
from django.core.signals import setting_changed
from django.db import (
    DEFAULT_DB_ALIAS,
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    connection,
    connections,
)
from django.db.backends.base.base import BaseDatabaseWrapper
from django.dispatch import receiver
from django.http import HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.security import SecurityMiddleware
from ninja.responses import NinjaJSONEncoder

from orchestrator.api import ingest
from orchestrator.api.auth import TokenRateThrottle
from orchestrator.api.errors import ApiError, database_unavailable, error_response, parse_json
from orchestrator.api.overload import buffered_body, declared_length
from orchestrator.api.policies import VERSION_HEADER
from orchestrator.api.runs import REPLAYED_HEADER
from orchestrator.api.schemas import RunIn, RunOut
from orchestrator.models import ApiToken, PolicyState, Run
from orchestrator.vocabulary import FailureCategory

logger = logging.getLogger(__name__)

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
Answer = tuple[str, list[tuple[str, str]], bytes]

# The operation served here, as the API is mounted (config.urls: "api/v1/").
REPORT_PATH = "/api/v1/runs"
# Set by config.server.ThreadWorker on a report this path declined once already: Django answers.
HANDED_OVER = "failsight.handed_over"
MAX_KEY_LENGTH = 255  # the Idempotency-Key header's limit (`Str255` on the view)


class Handover(Exception):
    """This request is not an ordinary report: Django's handler answers it."""


class FastReports:
    """WSGI middleware: serve ordinary single reports, hand everything else to `app`."""

    def __init__(self, app: Callable[[Environ, StartResponse], Iterable[bytes]]) -> None:
        self.app = app
        self.throttle = TokenRateThrottle()
        self.security = SecurityMiddleware(_unused)
        self.frames = XFrameOptionsMiddleware(_unused)

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        if (
            environ.get("PATH_INFO") != REPORT_PATH
            or environ.get("REQUEST_METHOD") != "POST"
            or not settings.INGEST_FAST_PATH
            or HANDED_OVER in environ
        ):
            return self.app(environ, start_response)
        try:
            status, headers, body = self.serve(environ)
        except Handover:
            return self.app(environ, start_response)
        start_response(status, headers)
        return [body]

    def enabled(self) -> bool:
        """Whether single reports are served here at all (INGEST_FAST_PATH)."""
        return settings.INGEST_FAST_PATH

    def serve(self, environ: Environ) -> Answer:
        """Answer an ordinary report; raise Handover for anything else.

        Until the report reaches the store nothing has been written, so any failure there (a
        token lookup with the database down included) is handed over: Django answers it in full.
        """
        try:
            body = _read_body(environ)
            request = WSGIRequest(environ)
        except Handover:
            raise
        except Exception:  # a request Django's handler knows how to refuse
            raise Handover from None
        try:
            token, run, raw = self.admit(request, body)
        except Handover:
            raise
        except (OperationalError, InterfaceError) as exc:  # the token lookup: answered at once
            return self.unavailable(request, exc)
        except Exception:
            logger.debug("single report handed to Django", exc_info=True)
            raise Handover from None
        answer = self.store(request, token, run, raw, request.META.get("HTTP_IDEMPOTENCY_KEY"))
        keep_connection()
        return answer

    def admit(self, request: WSGIRequest, body: bytes) -> tuple[ApiToken, RunIn, Any]:
        """The token, the run and the parsed body of an ordinary report."""
        try:
            request.get_host()  # ALLOWED_HOSTS
        except DisallowedHost:
            raise Handover from None
        if settings.SECURE_SSL_REDIRECT and not request.is_secure():
            raise Handover
        token = self.authenticate(request)
        try:
            raw = parse_json(body)
            run = RunIn.model_validate(raw)
        except (ApiError, pydantic.ValidationError, ValueError):
            raise Handover from None
        # Counted last, so that only a request over the limit is counted twice (here, then by
        # Django, which answers the 429).
        request.auth = token  # what the rate limit counts by, as on the view
        if not self.throttle.allow_request(request):
            raise Handover
        key = request.META.get("HTTP_IDEMPOTENCY_KEY")
        if key is not None and len(key) > MAX_KEY_LENGTH:
            raise Handover
        return token, run, raw

    def authenticate(self, request: WSGIRequest) -> ApiToken:
        scheme, _, secret = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
        if scheme.lower() != "bearer" or not secret:
            raise Handover
        token = ApiToken.objects.authenticate_cached(secret)
        if token is None:
            raise Handover
        token.touch()  # as `auth.BearerToken`: at most one write a minute per token
        return token

    def store(
        self, request: WSGIRequest, token: ApiToken, run: RunIn, raw: Any, key: str | None
    ) -> Answer:
        try:
            stored, replayed = ingest.ingest_one(token.pk, run, raw, key)
        except (ApiError, IntegrityError, ValueError):
            raise Handover from None  # refused before anything was stored
        except (OperationalError, InterfaceError) as exc:
            return self.unavailable(request, exc)
        except DatabaseError:
            raise Handover from None  # the statement failed whole: nothing was stored
        except Exception as exc:  # what the API answers for an error of its own: a logged 500
            logger.exception("API error on POST %s", REPORT_PATH, exc_info=exc)
            detail = "Internal error; it has been logged."
            return self.error(request, ApiError(500, FailureCategory.SERVER_FAULT, detail))
        body = render(stored)
        headers = [("Content-Type", _JSON)]
        if replayed:
            headers.append((REPLAYED_HEADER, "true"))
        try:
            headers.append((VERSION_HEADER, str(PolicyState.announced_version())))
        except DatabaseError:  # stored; the version is what cannot be told
            connection.close()
        headers += created_headers(request.is_secure())
        return "201 Created", [*headers, ("Content-Length", str(len(body)))], body

    def unavailable(self, request: WSGIRequest, exc: Exception) -> Answer:
        """The database is down: a 503 at once (handing over would wait for it a second time)."""
        connection.close()  # a broken connection goes back to the pool, which drops it
        logger.warning("database unavailable for a single report: %s", exc)
        return self.error(request, database_unavailable())

    def error(self, request: WSGIRequest, error: ApiError) -> Answer:
        return self.finish(request, error_response(request, error))

    def finish(self, request: WSGIRequest, response: HttpResponse) -> Answer:
        """The answer with the headers Django's middleware would have added."""
        response = self.security.process_response(request, response)
        response = self.frames.process_response(request, response)
        for name, value in content_security_headers():
            response.headers.setdefault(name, value)
        status = f"{response.status_code} {response.reason_phrase}"
        headers = [*response.items(), ("Content-Length", str(len(response.content)))]
        return status, headers, response.content


_JSON = "application/json; charset=utf-8"

# The threads whose database connection a fast report kept: ident -> (thread, its connection).
_kept: dict[int, tuple[threading.Thread, BaseDatabaseWrapper]] = {}
_kept_lock = threading.Lock()


def keep_connection() -> None:
    """Note that this thread keeps its connection for its next report, and give back the
    connections of the threads that ended since they kept theirs.

    Only a thread seen for the first time takes the lock: under gunicorn, whose threads live as
    long as the worker, that is once per thread. An ended thread is never scheduled again, so
    its connection is closed here, from this thread (the pool takes it back)."""
    thread = threading.current_thread()
    kept = _kept.get(thread.ident)  # type: ignore[arg-type]  # a running thread has an ident
    if kept is not None and kept[0] is thread:
        return
    with _kept_lock:
        for ident, (other, wrapper) in list(_kept.items()):
            if not other.is_alive():
                del _kept[ident]
                _give_back(wrapper)
        _kept[thread.ident] = (thread, connections[DEFAULT_DB_ALIAS])  # type: ignore[index]


def _give_back(wrapper: BaseDatabaseWrapper) -> None:
    """Close an ended thread's connection (to the pool, with one). `close()` itself refuses a
    connection of another thread; its thread has ended, so nobody else can be using it."""
    try:
        wrapper._close()  # close() minus its same-thread check
    except DatabaseError:  # a broken connection: the pool counts it out either way
        logger.debug("an ended thread's connection failed to close", exc_info=True)
    wrapper.connection = None


def render(stored: Run) -> bytes:
    """The run as the view's answer renders it (`RunOut` through ninja's renderer), in a tenth
    of the time: each field read as ninja reads it (its `resolve_` method, else the attribute
    its validation alias names), times as ninja's encoder writes them, the rest by orjson.
    `RunOut`'s fields are the plan, so a field added there is answered here too; the tests
    compare the two answers whole."""
    names, attributes, resolvers, order, times = _reading_plan()
    values = order((*attributes(stored), *(resolve(stored) for resolve in resolvers)))
    data = dict(zip(names, values, strict=True))
    for name in times:
        if data[name] is not None:
            data[name] = _ENCODER.default(data[name])
    try:
        return orjson.dumps(data)
    except TypeError:  # a value orjson does not take: ninja's own way, slower and certain
        return json.dumps(data, cls=NinjaJSONEncoder).encode()


@cache
def _reading_plan() -> tuple[tuple[str, ...], attrgetter, tuple, itemgetter, tuple[str, ...]]:
    """`RunOut`'s field names; one `attrgetter` for the fields read as attributes (one C call
    for all of them); the resolvers of the others; the `itemgetter` that puts (attributes,
    resolved) back in field order; and the fields that hold a time (ninja's encoder writes
    those, orjson would write them to the microsecond)."""
    names, attributes, resolvers = [], [], []
    for name, field in RunOut.model_fields.items():
        names.append(name)
        resolver = getattr(RunOut, f"resolve_{name}", None)
        if resolver is None:
            attributes.append((name, field.validation_alias or name))
        else:
            resolvers.append((name, resolver))
    sources = [name for name, _ in attributes] + [name for name, _ in resolvers]
    times = tuple(
        name for name, field in RunOut.model_fields.items() if _holds_time(field.annotation)
    )
    return (
        tuple(names),
        attrgetter(*(attribute for _, attribute in attributes)),
        tuple(resolver for _, resolver in resolvers),
        itemgetter(*(sources.index(name) for name in names)),
        times,
    )


def _holds_time(annotation: Any) -> bool:
    """Whether a field annotated so holds a datetime (`datetime`, `datetime | None` …)."""
    return annotation is datetime or datetime in typing.get_args(annotation)


_ENCODER = DjangoJSONEncoder()  # what ninja's renderer writes a datetime with


def _read_body(environ: Environ) -> bytes:
    """The body, read (a known, acceptable length only) and put back, unread, for Django."""
    body = buffered_body(environ)  # Shedding has buffered it already behind gunicorn
    if body is None or len(body) != declared_length(environ):
        raise Handover
    return body


@cache
def created_headers(secure: bool) -> tuple[tuple[str, str], ...]:
    """The headers `FastReports.finish` adds to a stored report's answer (201, JSON): they depend
    on the settings and on whether the request came over HTTPS only, so they are made once each
    way, by `finish` itself, rather than through the middleware for every report."""
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": REPORT_PATH, "wsgi.input": io.BytesIO()}
    if secure:
        environ["wsgi.url_scheme"] = "https"
    probe = HttpResponse(status=201, content_type=_JSON)
    _, headers, _ = FastReports(_unused).finish(WSGIRequest(environ), probe)
    return tuple((n, v) for n, v in headers if n not in ("Content-Type", "Content-Length"))


@cache
def content_security_headers() -> tuple[tuple[str, str], ...]:
    """The Content-Security-Policy headers django-csp sets on an answer with no nonce: they
    depend on the settings only, so they are built once per process."""
    from csp.middleware import CSPMiddleware

    probe = HttpResponse(status=201, content_type=_JSON)
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": REPORT_PATH, "wsgi.input": io.BytesIO()}
    request = WSGIRequest(environ)
    response = CSPMiddleware(_unused).process_response(request, probe)
    return tuple(
        (name, value) for name, value in response.items() if name.startswith("Content-Security")
    )


@receiver(setting_changed)
def _forget_headers(**kwargs: Any) -> None:
    """Settings changed at run time (tests do): the headers made once are made again."""
    created_headers.cache_clear()
    content_security_headers.cache_clear()


def _unused(request: Any) -> HttpResponse:  # the middleware here only process responses
    raise AssertionError("not called")
