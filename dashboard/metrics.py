"""The Prometheus text endpoint: run counts from the rollups, the review queue, breaker states.

Scrapers do not sign in: the endpoint accepts `Authorization: Bearer <METRICS_TOKEN>` or a
client address in METRICS_ALLOWED_IPS (REMOTE_ADDR: behind a proxy, use the token).
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from dashboard.sources import source_states
from dashboard.stats import all_time_counts
from orchestrator.models import ReviewItem

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BREAKER_STATES = ("closed", "open", "half_open")


def allowed(request: HttpRequest) -> bool:
    token = getattr(settings, "METRICS_TOKEN", "")
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        # Constant-time comparison: the token is a shared secret.
        return hmac.compare_digest(header.removeprefix("Bearer ").strip().encode(), token.encode())
    return request.META.get("REMOTE_ADDR", "") in getattr(settings, "METRICS_ALLOWED_IPS", [])


def _label(value: object) -> str:
    # The exposition format escapes backslash, double quote and newline in label values.
    text = str(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _runs_lines() -> list[str]:
    lines = [
        "# HELP failsight_runs_total Runs recorded, by status, failure type and source.",
        "# TYPE failsight_runs_total counter",
    ]
    for (status, ftype, source), n in sorted(all_time_counts().items()):
        lines.append(
            f'failsight_runs_total{{status="{_label(status)}",failure_type="{_label(ftype)}",'
            f'source="{_label(source)}"}} {n}'
        )
    return lines


def _review_lines() -> list[str]:
    pending = ReviewItem.objects.open()
    oldest = pending.values_list("created_at", flat=True).first()
    age = (timezone.now() - oldest).total_seconds() if oldest else 0
    return [
        "# HELP failsight_review_open Review items waiting for a human (open or claimed).",
        "# TYPE failsight_review_open gauge",
        f"failsight_review_open {pending.count()}",
        "# HELP failsight_review_oldest_age_seconds Age of the oldest waiting review item.",
        "# TYPE failsight_review_oldest_age_seconds gauge",
        f"failsight_review_oldest_age_seconds {age:.0f}",
    ]


def _source_lines() -> list[str]:
    lines = [
        "# HELP failsight_breaker_state Circuit breaker state per source (1 for the current one).",
        "# TYPE failsight_breaker_state gauge",
    ]
    budget = [
        "# HELP failsight_retry_budget_tokens Tokens left in the source's retry budget.",
        "# TYPE failsight_retry_budget_tokens gauge",
    ]
    for s in source_states():
        source = _label(s["source"])
        for state in BREAKER_STATES:
            value = 1 if s["state"] == state else 0
            lines.append(f'failsight_breaker_state{{source="{source}",state="{state}"}} {value}')
        if s["tokens"] is not None:
            budget.append(f'failsight_retry_budget_tokens{{source="{source}"}} {s["tokens"]}')
    return lines + budget


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not allowed(request):
        return HttpResponse("forbidden\n", status=403, content_type="text/plain")
    body = "\n".join([*_runs_lines(), *_review_lines(), *_source_lines()]) + "\n"
    return HttpResponse(body, content_type=CONTENT_TYPE)
