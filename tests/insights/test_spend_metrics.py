"""/metrics' failsight_spend_total and failsight_wasted_spend_total: the runs' costs in
COST_CURRENCY folded per hour, by source and failure type ("none" for runs that did not fail),
wasted spend as the Costs page defines it (retries that failed again, and the share of a run's
cost spent fetching again what the failure before it had gathered), read with prometheus_client's
parser to the micro-unit, with bounded source labels."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.cache import cache
from django.urls import reverse

from insights import observations, slo

from .conftest import make_failure, make_run
from .metrics_history import parse

pytestmark = pytest.mark.django_db

SPEND = "failsight_spend"
WASTED = "failsight_wasted_spend"


@pytest.fixture(autouse=True)
def token(settings) -> None:
    settings.METRICS_TOKEN = "s3cret"
    settings.COST_CURRENCY = "USD"
    cache.delete(slo.CACHE_KEY)


def scrape(client) -> dict[str, dict[tuple, float]]:
    response = client.get(reverse("metrics"), HTTP_AUTHORIZATION="Bearer s3cret")
    assert response.status_code == 200
    families = parse(response.content.decode())
    return {
        name: {
            tuple(sorted(s.labels.items())): s.value
            for s in families[name].samples
            if s.name == f"{name}_total"
        }
        for name in (SPEND, WASTED)
    }


def key(source: str, failure_type: str) -> tuple:
    return (("failure_type", failure_type), ("project", "default"), ("source", source))


def history() -> None:
    """On web_search: a success, a timeout, its retry that failed again having gathered two
    results, and its second retry that succeeded with one of those among its four; a news_api
    failure; a run costed in EUR and one without a cost (both left out)."""
    make_run(cost=Decimal("0.010000"))
    first = make_failure(
        "timeout",
        cost=Decimal("0.020000"),
        partial_count=2,
        partial_results=[{"url": "a"}, {"url": "b"}],
    )
    make_failure(
        "timeout",
        cost=Decimal("0.030000"),
        retry_of=first,
        attempt=2,
        partial_count=2,
        partial_results=[{"url": "a"}, {"url": "b"}],
    )
    make_run(
        cost=Decimal("0.040004"),
        retry_of=first,
        attempt=3,
        result_count=4,
        results=[{"url": "b"}, {"url": "c"}, {"url": "d"}, {"url": "e"}],
    )
    make_failure("rate_limited", source="news_api", cost=Decimal("0.005000"))
    make_run(cost=Decimal("9.000000"), cost_currency="EUR")
    make_run()


def test_spend_and_wasted_spend_are_counted_to_the_micro_unit(client):
    history()
    observations.fold()
    found = scrape(client)
    assert found[SPEND] == {
        key("web_search", "none"): pytest.approx(0.050004, abs=1e-9),
        key("web_search", "timeout"): pytest.approx(0.05, abs=1e-9),
        key("news_api", "rate_limited"): pytest.approx(0.005, abs=1e-9),
    }
    # The retry that failed again (0.03), and a quarter of the second retry's cost (0.010001):
    # one of its four results is one the failure before it had gathered.
    assert found[WASTED] == {
        key("web_search", "timeout"): pytest.approx(0.03, abs=1e-9),
        key("web_search", "none"): pytest.approx(0.010001, abs=1e-9),
    }


def test_a_second_fold_counts_nothing_twice(client):
    history()
    observations.fold()
    first = scrape(client)
    observations.fold()
    assert scrape(client) == first


def test_sources_beyond_the_top_n_add_up_under_other(client, settings):
    settings.METRICS_TOP_N = 1
    for i, source in enumerate(("a_source", "b_source", "b_source")):
        make_run(source=source, cost=Decimal("0.1") * (i + 1))
    observations.fold()
    spend = scrape(client)[SPEND]
    assert set(spend) == {key("b_source", "none"), key("other", "none")}
    assert spend[key("other", "none")] == pytest.approx(0.1, abs=1e-9)
    assert spend[key("b_source", "none")] == pytest.approx(0.5, abs=1e-9)
