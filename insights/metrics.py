"""The Prometheus endpoint: run counts from the running totals, the review queue, breaker states,
SLOs and the folded observations (`insights.observations`), all read from the database at each
scrape by one collector, so that any web process answers for the whole cluster. Agent and source
labels are bounded (`Bounds`). Scrapers send `Authorization: Bearer <METRICS_TOKEN>` or come from
METRICS_ALLOWED_IPS (empty by default), and a signed-in staff user who may see every project reads
it in the browser (its figures are the whole deployment's, never split by who asks); a wrong token
is refused even from an allowed address or a staff session."""

from __future__ import annotations

import hmac
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse
from django.shortcuts import resolve_url
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.utils import floatToGoString

from insights import observations, slo
from insights.stats import all_time_counts
from orchestrator.addresses import address_in, client_ip
from orchestrator.coordination import spend
from orchestrator.coordination.budget import SourceState, source_states
from orchestrator.models import Project, ReviewItem, Run
from orchestrator.vocabulary import Breaker

OTHER = "other"
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
    if _staff(request):
        return True
    allow_list = settings.METRICS_ALLOWED_IPS
    return bool(allow_list) and address_in(client_ip(request), allow_list)


def _staff(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    if not (user and user.is_authenticated and user.is_active and user.is_staff):
        return False
    return Project.objects.ids_limiting(user) is None


def refusal(request: HttpRequest) -> HttpResponse:
    """A 403 that says how to get in, and nothing about the server's settings or its data."""
    lines = ["403 Forbidden: /metrics is read by Prometheus and by staff.", "", "Get in by one of:"]
    lines += [
        "- the header `Authorization: Bearer <METRICS_TOKEN>`, the token the server's "
        "METRICS_TOKEN environment variable sets (docs/configuration.md);",
        "- scraping from an address listed in METRICS_ALLOWED_IPS;",
        f"- signing in as a staff user: {resolve_url(settings.LOGIN_URL)}?next={request.path} "
        "(one who may see every project: the figures are every project's).",
    ]
    user = getattr(request, "user", None)
    if request.headers.get("Authorization", "").startswith("Bearer "):
        lines += ["", "The bearer token sent is not the METRICS_TOKEN."]
    elif user is not None and user.is_authenticated and user.is_staff:
        lines += ["", f"You are signed in as {user.get_username()}, who may not see every project."]
    elif user is not None and user.is_authenticated:
        lines += ["", f"You are signed in as {user.get_username()}, who is not staff."]
    text = "\n".join(lines) + "\n"
    return HttpResponse(text, status=403, content_type="text/plain; charset=utf-8")


@dataclass(frozen=True)
class Bounds:
    """Which agent and source names keep series of their own: every name of a kind while there are
    at most METRICS_TOP_N, else the METRICS_TOP_N with the most finished runs over the SLO window
    (ties by name); the others add up under `other`. A window of weeks moves slowly, so a name
    seldom changes series."""

    kept: dict[str, frozenset[str] | None]

    @classmethod
    def ranked(cls, names: dict[str, set[str]], volume: dict[tuple[str, str], int]) -> Bounds:
        top = settings.METRICS_TOP_N
        kept: dict[str, frozenset[str] | None] = {}
        for kind, found in names.items():
            ranked = sorted(found, key=lambda name: (-volume.get((kind, name), 0), name))
            kept[kind] = None if len(ranked) <= top else frozenset(ranked[:top])
        return cls(kept)

    def __call__(self, kind: str, name: str) -> str:
        kept = self.kept.get(kind)
        return name if kept is None or not name or name in kept else OTHER


class Collector:
    """Every family, read when a scrape asks (prometheus_client's custom collector protocol)."""

    def collect(self) -> Iterator[Metric]:
        counts = all_time_counts()
        states = source_states()
        objectives = slo.cached_objectives()
        folded = observations.folded()
        names: dict[str, set[str]] = {
            "agent": {row[1] for row in folded if row[1]},
            "source": {row[2] for row in folded if row[2]} | {key[2] for key in counts},
        }
        names["source"] |= {s.source for s in states}
        for o in objectives:
            names[o.kind].add(o.name)
        bound = Bounds.ranked(names, {(o.kind, o.name): o.total for o in objectives})
        yield from _runs(counts, bound)
        yield from _review()
        yield from _sources(states, bound)
        yield from _slos(objectives, bound)
        yield from _observed(observations.series(folded, bound))
        yield from _budgets(spend.states())


def _runs(counts: dict[tuple[str, str, str], dict[str, int]], bound: Bounds) -> Iterator[Metric]:
    named = {source: bound("source", source) for _, _, source in counts}
    runs: dict[tuple[str, str, str], int] = defaultdict(int)
    for (status, ftype, source), totals in counts.items():
        runs[(status, ftype, named[source])] += totals["count"]
    family = CounterMetricFamily(
        "failsight_runs_total",
        "Runs recorded, by status, failure type and source.",
        labels=["status", "failure_type", "source"],
    )
    for key, n in sorted(runs.items()):
        family.add_metric(list(key), n)
    yield family
    for name, help_text, column, failures_only in SET_COUNTERS:
        per_source: dict[str, int] = defaultdict(int)
        for (status, _, source), totals in counts.items():
            if not failures_only or status in Run.FAILURE:
                per_source[named[source]] += totals[column]
        family = CounterMetricFamily(name, help_text, labels=["source"])
        for source, n in sorted(per_source.items()):
            family.add_metric([source], n)
        yield family


def _review() -> Iterator[Metric]:
    """Per project (a label operators bound: they create the projects), every project shown."""
    rows = (
        ReviewItem.objects.open()
        .values_list("project__slug")
        .annotate(n=Count("id"), oldest=Min("created_at"))
        .order_by()
    )
    waiting = {slug: (n, oldest) for slug, n, oldest in rows}
    now = timezone.now()
    count = GaugeMetricFamily(
        "failsight_review_open",
        "Review items waiting for a human (open or claimed), by project.",
        labels=["project"],
    )
    age = GaugeMetricFamily(
        "failsight_review_oldest_age_seconds",
        "Age of the oldest waiting review item, by project.",
        labels=["project"],
    )
    for slug in _slugs():
        n, oldest = waiting.get(slug, (0, None))
        count.add_metric([slug], n)
        age.add_metric([slug], round((now - oldest).total_seconds()) if oldest else 0)
    yield count
    yield age


def _sources(states: list[SourceState], bound: Bounds) -> Iterator[Metric]:
    breakers: dict[tuple[str, str], int] = defaultdict(int)
    tokens: dict[str, float] = defaultdict(float)
    for s in states:
        source = bound("source", s.source)
        for state in Breaker:
            breakers[(source, state.value)] += 1 if s.breaker == state else 0
        tokens[source] += s.tokens
    breaker = GaugeMetricFamily(
        "failsight_breaker_state",
        "Circuit breaker state per source (1 for the current one; under other, how many).",
        labels=["source", "state"],
    )
    for key, n in sorted(breakers.items()):
        breaker.add_metric(list(key), n)
    budget = GaugeMetricFamily(
        "failsight_retry_budget_tokens",
        "Tokens left in the source's retry budget (under other, their sum).",
        labels=["source"],
    )
    for source, n in sorted(tokens.items()):
        budget.add_metric([source], n)
    yield breaker
    yield budget


def _slos(objectives: list[slo.Objective], bound: Bounds) -> Iterator[Metric]:
    labels = ["kind", "name"]
    objective = GaugeMetricFamily(
        "failsight_slo_objective",
        "Objective: the share of finished runs to succeed.",
        labels=labels,
    )
    success = GaugeMetricFamily(
        "failsight_slo_success_ratio", "Share of finished runs that succeeded.", labels=labels
    )
    left = GaugeMetricFamily(
        "failsight_slo_error_budget_remaining",
        "Share of the error budget not spent (below 0: overspent).",
        labels=labels,
    )
    burn = GaugeMetricFamily(
        "failsight_slo_burn_rate",
        "Error-budget burn rate over a window (1: on pace).",
        labels=[*labels, "window"],
    )
    for o in _pooled(objectives, bound):
        target = [o.kind, o.name]
        objective.add_metric(target, o.objective)
        if o.success_rate is not None:
            success.add_metric(target, o.success_rate)
        left.add_metric(target, o.budget_remaining)
        for minutes in slo.SHORT_WINDOWS:
            burn.add_metric([*target, f"{minutes}m"], o.burn_rate(minutes))
    yield from (objective, success, left, burn)


def _budgets(states: list[spend.BudgetState]) -> Iterator[Metric]:
    """The spend budgets (few, set by operators: their names need no bound): today's share of
    each one's daily limit, and the limit."""
    labels = ["scope", "name", "currency"]
    used = GaugeMetricFamily(
        "failsight_spend_budget_used_ratio",
        "Share of its daily limit a budgeted source or agent has spent today (UTC; 1: reached).",
        labels=labels,
    )
    limit = GaugeMetricFamily(
        "failsight_spend_budget_daily_limit",
        "A spend budget's daily limit, in its currency.",
        labels=labels,
    )
    for state in states:
        key = [state.scope, state.name, state.currency]
        used.add_metric(key, state.ratio)
        limit.add_metric(key, float(state.limit))
    yield from (used, limit)


def _pooled(objectives: Iterable[slo.Objective], bound: Bounds) -> list[slo.Objective]:
    """The objectives of the names kept, then per kind one of the others' runs pooled, against
    the default objective."""
    kept, pooled = [], {}
    for o in objectives:
        if bound(o.kind, o.name) != OTHER:
            kept.append(o)
            continue
        rest = pooled.setdefault(o.kind, slo.Objective(o.kind, OTHER, settings.SLO_OBJECTIVE))
        rest.total += o.total
        rest.good += o.good
        for minutes, (total, good) in o.windows.items():
            was = rest.windows.get(minutes, (0, 0))
            rest.windows[minutes] = (was[0] + total, was[1] + good)
    return kept + [pooled[kind] for kind in slo.KINDS if kind in pooled]


def _observed(found: dict[str, dict[tuple[str, ...], observations.Series]]) -> Iterator[Metric]:
    for observed in observations.FAMILIES:
        labels = list(observed.labels)
        series = found[observed.name]
        if observed.money:
            yield _money(observed, labels, series)
            continue
        if not observed.histogram:
            family = CounterMetricFamily(observed.name, observed.help, labels=labels)
            for key, s in sorted(series.items()):
                family.add_metric(list(key), s.counts[0])
            yield family
            continue
        if not series and set(labels) <= {"project"}:
            # A series from the start (one per project), for queries and dashboards.
            keys = [(slug,) for slug in _slugs()] if labels else [()]
            series = {key: observations.Series([0] * (len(observed.bounds) + 1)) for key in keys}
        family = HistogramMetricFamily(observed.name, observed.help, labels=labels)
        les = [floatToGoString(b) for b in (*observed.bounds, float("inf"))]
        for key, s in sorted(series.items()):
            family.add_metric(list(key), list(zip(les, s.cumulative(), strict=True)), s.total)
        yield family


def _slugs() -> list[str]:
    return list(Project.objects.order_by("slug").values_list("slug", flat=True))


# The failure type of a run that did not fail, in the spend families.
NO_FAILURE = "none"


def _money(
    observed: observations.Observed,
    labels: list[str],
    series: dict[tuple[str, ...], observations.Series],
) -> Metric:
    """A counter of amounts (its series' sums, rounded to the micro-unit), a run that did not
    fail under failure_type "none"."""
    at = labels.index("failure_type")
    amounts: dict[tuple[str, ...], float] = defaultdict(float)
    for key, s in series.items():
        named = (*key[:at], key[at] or NO_FAILURE, *key[at + 1 :])
        amounts[named] += s.total
    family = CounterMetricFamily(observed.name, observed.help, labels=labels)
    for key, amount in sorted(amounts.items()):
        family.add_metric(list(key), round(amount, 6))
    return family


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not allowed(request):
        return refusal(request)
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encode(Collector()), content_type=content_type)
