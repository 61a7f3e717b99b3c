"""Load shedding and abandoned requests: work nobody will read is not done.

Under overload a server that processes every request in turn answers each one later than the
last, until every answer comes after its client's timeout: all the work is wasted and the
clients retry on top of it. `OverloadMiddleware`, first in the stack, refuses two kinds of
request before any work is done for them:

- one that waited longer than WEB_SHED_AFTER_MS for a thread (the worker of `config.server`
  says when it was queued): a 503 at once, in the error envelope with `Retry-After`, so the
  client backs off while the requests that can still be answered in time are;
- one whose client has already gone (it timed out and closed the connection while the request
  waited): nothing is processed and nothing is stored; the answer (499, as nginx logs it) is
  written to nobody.

Without that worker (`runserver`, the test client) no queue time is known and nothing is shed.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from orchestrator.api.errors import ApiError, error_response
from orchestrator.vocabulary import FailureCategory

logger = logging.getLogger(__name__)

# Set by config.server.ThreadWorker: when the connection was queued for a thread (monotonic).
QUEUED_AT = "failsight.queued_at"
# What a shed request's client should wait before sending it again.
SHED_RETRY_AFTER = 1.0
CLIENT_GONE = 499
_PEEK = socket.MSG_PEEK | socket.MSG_DONTWAIT


class OverloadMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        waited = queue_time_ms(request)
        limit = settings.WEB_SHED_AFTER_MS
        if limit and waited is not None and waited > limit:
            return _quiet(shed(request, waited))
        if client_gone(request):
            logger.info("%s %s: the client left before it was served", request.method, request.path)
            return _quiet(HttpResponse(status=CLIENT_GONE, reason="Client Closed Request"))
        return self.get_response(request)


def _quiet(response: HttpResponse) -> HttpResponse:
    """Finish an answer given before the rest of the stack: its length (CommonMiddleware would
    set it), and no error log line per refused request (that would add work under overload)."""
    response["Content-Length"] = str(len(response.content))
    response._has_been_logged = True  # type: ignore[attr-defined]  # django.utils.log's flag
    return response


def queue_time_ms(request: HttpRequest) -> float | None:
    """Milliseconds the request waited for a thread, when the server said when it was queued."""
    queued_at = request.META.get(QUEUED_AT)
    return None if queued_at is None else (time.monotonic() - queued_at) * 1000


def shed(request: HttpRequest, waited: float) -> HttpResponse:
    detail = f"The server is overloaded (this request waited {waited:.0f} ms); nothing was done."
    alternatives = ["retry after Retry-After seconds (with the same Idempotency-Key)"]
    if request.path_info.startswith("/api/"):
        alternatives.append("report runs in batches (POST /api/v1/runs/batch)")
        error = ApiError(
            503,
            FailureCategory.SERVER_FAULT,
            detail,
            retry_after=SHED_RETRY_AFTER,
            alternatives=alternatives,
        )
        return error_response(request, error)
    response = HttpResponse(detail, status=503, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(int(SHED_RETRY_AFTER))
    return response


def client_gone(request: HttpRequest) -> bool:
    """Return True if the client closed its connection (known only behind gunicorn).

    The body is read first when it is small enough to keep (the view reads it anyway): a client
    that sent its request and hung up leaves the end of the stream right behind the body, where
    a peek at the socket sees it. An HTTP client does not half-close a connection it still
    expects an answer on, so the end of the stream means it left.
    """
    sock = request.META.get("gunicorn.socket")
    if sock is None:
        return False
    try:
        _read_small_body(request)
        return sock.recv(1, _PEEK) == b""
    except BlockingIOError:  # nothing to read yet: still connected
        return False
    except OSError:  # reset, or the body ended early
        return True


def _read_small_body(request: HttpRequest) -> None:
    meta = request.META
    if "chunked" in meta.get("HTTP_TRANSFER_ENCODING", "").lower():
        return  # ChunkedBodyMiddleware reads it (Django would read it as empty)
    try:
        length = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return
    if 0 < length <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        request.body  # noqa: B018  # read and kept for the view
