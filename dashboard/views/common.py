"""What every dashboard page shares: the fragment test, a safe `next`, the poll interval, the
list's deferred columns."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, StreamingHttpResponse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme

from orchestrator.analytics import export

# The envelope's bulky JSON is not needed in lists.
LIST_DEFER = ("results", "partial_results", "exception_chain", "alternatives")
ATTEMPTS_SHOWN = 100


def poll_seconds() -> float | int:
    """How often tiles refresh; a setting so the browser test need not wait 10 s."""
    value = float(getattr(settings, "DASHBOARD_POLL_SECONDS", 10))
    return int(value) if value.is_integer() else value


def wants_fragment(request: HttpRequest) -> bool:
    # A history restore (back button after a cache miss) needs the whole page, not a fragment.
    return bool(request.htmx) and not request.htmx.history_restore_request


def safe_next(request: HttpRequest, default: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    allowed = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return target if allowed else default


def download(lines: Any, fmt: str, name: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(lines, content_type=export.FORMATS[fmt])
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="{name}-{stamp}.{fmt}"'
    return response
