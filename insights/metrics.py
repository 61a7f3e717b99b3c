"""The Prometheus text endpoint: run counts from the rollups, the review queue, breaker states and
SLOs. Scrapers send `Authorization: Bearer <METRICS_TOKEN>` or come from METRICS_ALLOWED_IPS (empty
by default); a wrong token is refused even from an allowed address."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from insights import slo
from insights.stats import all_time_counts
from orchestrator.addresses import address_in, client_ip
from orchestrator.coordination.budget import source_states
from orchestrator.models import ReviewItem, Run
from orchestrator.vocabulary import Breaker

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Counters of named run sets: (metric, help, the rollup column it sums, failures only).
SET_COUNTERS = (
    ("failsight_retries_total", "Retries spent (attempts after the first).", "retries", False),
    ("failsight_wasted_retries_total", "Retries that failed again.", "retries", True),
    (
        "failsight_early_retries_total",
        "Retries started before their due time.",
        "early_retries",
        False,
    ),
    (
        "failsight_futile_retries_total",
        "Failures retried although they said a retry cannot help.",
        "futile_retries",
        False,
    ),
    (
        "failsight_avoided_retries_total",
        "Failures routed elsewhere than a retry.",
        "avoided_retries",
        False,
    ),
    (
        "failsight_switched_runs_total",
        "Runs started on another source after a switch.",
        "switched",
        False,
    ),
    (
        "failsight_partial_results_total",
        "Partial results kept by failed runs.",
        "partial_items",
        False,
    ),
)


def allowed(request: HttpRequest) -> bool:
    token = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        # Constant-time comparison: the token is a shared secret.
        given = header.removeprefix("Bearer ").strip().encode()
        return bool(token) and hmac.compare_digest(given, token.encode())
    allow_list = settings.METRICS_ALLOWED_IPS
    return bool(allow_list) and address_in(client_ip(request), allow_list)


def _label(value: object) -> str:
    # The exposition format escapes backslash, double quote and newline in label values.
    text = str(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _runs_lines() -> list[str]:
    counts = sorted(all_time_counts().items())
    lines = [
        "# HELP failsight_runs_total Runs recorded, by status, failure type and source.",
        "# TYPE failsight_runs_total counter",
    ]
    for (status, ftype, source), totals in counts:
        lines.append(
            f'failsight_runs_total{{status="{_label(status)}",failure_type="{_label(ftype)}",'
            f'source="{_label(source)}"}} {totals["count"]}'
        )
    for name, help_text, column, failures_only in SET_COUNTERS:
        per_source: dict[str, int] = {}
        for (status, _, source), totals in counts:
            if failures_only and status not in Run.FAILURE:
                continue
            per_source[source] = per_source.get(source, 0) + totals[column]
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter"]
        lines += [f'{name}{{source="{_label(src)}"}} {n}' for src, n in sorted(per_source.items())]
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
        source = _label(s.source)
        for state in Breaker:
            value = 1 if s.breaker == state else 0
            lines.append(f'failsight_breaker_state{{source="{source}",state="{state}"}} {value}')
        budget.append(f'failsight_retry_budget_tokens{{source="{source}"}} {s.tokens}')
    return lines + budget


def _slo_lines() -> list[str]:
    lines: dict[str, list[str]] = {
        "failsight_slo_objective": ["gauge", "Objective: the share of finished runs to succeed."],
        "failsight_slo_success_ratio": ["gauge", "Share of finished runs that succeeded."],
        "failsight_slo_error_budget_remaining": [
            "gauge",
            "Share of the error budget not spent (below 0: overspent).",
        ],
        "failsight_slo_burn_rate": ["gauge", "Error-budget burn rate over a window (1: on pace)."],
    }
    out: dict[str, list[str]] = {name: [] for name in lines}
    for o in slo.cached_objectives():
        target = f'kind="{o.kind}",name="{_label(o.name)}"'
        out["failsight_slo_objective"].append(f"failsight_slo_objective{{{target}}} {o.objective}")
        if o.success_rate is not None:
            ratio = f"failsight_slo_success_ratio{{{target}}} {o.success_rate:.6f}"
            out["failsight_slo_success_ratio"].append(ratio)
        left = f"failsight_slo_error_budget_remaining{{{target}}} {o.budget_remaining:.6f}"
        out["failsight_slo_error_budget_remaining"].append(left)
        for minutes in slo.SHORT_WINDOWS:
            rate = o.burn_rate(minutes)
            out["failsight_slo_burn_rate"].append(
                f'failsight_slo_burn_rate{{{target},window="{minutes}m"}} {rate:.6f}'
            )
    result = []
    for name, (kind, help_text) in lines.items():
        result += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *out[name]]
    return result


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not allowed(request):
        return HttpResponse("forbidden\n", status=403, content_type="text/plain")
    lines = [*_runs_lines(), *_review_lines(), *_source_lines(), *_slo_lines()]
    body = "\n".join(lines) + "\n"
    return HttpResponse(body, content_type=CONTENT_TYPE)
