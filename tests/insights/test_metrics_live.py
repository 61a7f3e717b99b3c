"""/metrics from the web server as shipped (two worker processes), parsed with prometheus_client's
parser: every histogram's buckets, count and sum and every counter equal what a hand-built history
implies, whichever process answers, with sources beyond METRICS_TOP_N under `other`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.db import connection
from django.utils import timezone
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)

from insights import observations
from tests.api.helpers import web_env
from tests.conftest import require_service
from tests.services import start_web

from .metrics_history import build, check_implied, parse, top

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

TOKEN = "live-metrics-token"
TOP_N = 3


@pytest.fixture(scope="module")
def web(django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_service(connection.vendor == "postgresql", "PostgreSQL")
    var = tmp_path_factory.mktemp("web")
    env = web_env(var, METRICS_TOKEN=TOKEN, METRICS_TOP_N=str(TOP_N))
    server, url = start_web(env, var / "web.log", WEB_CONCURRENCY="2")
    try:
        yield url
    finally:
        server.stop()


def scrape(web: str, **headers: str) -> httpx.Response:
    response = httpx.get(
        f"{web}/metrics", headers={"Authorization": f"Bearer {TOKEN}", **headers}, timeout=30
    )
    assert response.status_code == 200, response.text
    return response


def test_a_live_scrape_parses_to_what_the_history_implies(web: str) -> None:
    h = build(timezone.now(), {f"source_{i}": 20 - i for i in range(TOP_N + 5)})
    observations.fold()  # as beat does every minute
    response = scrape(web)
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    families = parse(response.text)
    bound = top(h.finished, TOP_N)
    check_implied(h, families, source=bound)

    runs = [s for s in families["failsight_runs"].samples if s.name == "failsight_runs_total"]
    assert len({bound(name) for name in h.finished}) == TOP_N + 1
    assert {s.labels["source"] for s in runs} == {bound(name) for name in h.finished}
    other = sum(s.value for s in runs if s.labels["source"] == "other")
    assert other == sum(n for name, n in h.finished.items() if bound(name) == "other")

    # Each process reads the same folded rows: any of them answers alike.
    for _ in range(4):
        check_implied(h, parse(scrape(web).text), source=bound)

    # A run finished since the last fold is counted by the next one.
    h.run(agent="researcher", source="source_7", duration_ms=700.0)
    h.observe("failsight_run_duration_seconds", ("researcher", "source_7"), 0.7)
    observations.fold()
    check_implied(h, parse(scrape(web).text), source=bound)


def test_a_scraper_asking_for_openmetrics_gets_it(web: str) -> None:
    build(timezone.now(), {"web_search": 2})
    observations.fold()
    accept = "application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5"
    response = scrape(web, Accept=accept)
    assert response.headers["Content-Type"].startswith("application/openmetrics-text")
    names = {family.name for family in openmetrics_families(response.text)}
    assert {"failsight_runs", "failsight_run_duration_seconds", "failsight_decisions"} <= names


def test_a_live_scrape_without_the_token_is_refused(web: str) -> None:
    response = httpx.get(f"{web}/metrics", timeout=30)
    assert response.status_code == 403 and "failsight_" not in response.text
