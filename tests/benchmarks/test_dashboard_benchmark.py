"""Smoke test of benchmarks/dashboard.py: a tiny load and every page timed, on PostgreSQL.

Skipped on SQLite locally, failed in CI without PostgreSQL (require_service). The benchmark uses
its own database, <DATABASE_URL's name>_dash_smoke (not the full run's failsight_dash_bench), on
the server of DATABASE_URL.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from tests.benchmarks.smoke import run_benchmark

ROOT = Path(__file__).resolve().parents[2]

# Every six-hour block the benchmark's fold stored, against the sum of its six hourly rows, and
# every block the hourly rows call for up to the newest stored one, against the stored ones (a
# FULL JOIN both ways).
BLOCKS_AGAINST_HOURS = """
WITH hours AS (
    SELECT generate_series(min(hour) - interval '5 hours',
                           (SELECT max(start) FROM dashboard_sixhourrollup), interval '1 hour')
           AS start
    FROM dashboard_runrollup
), expected AS (
    SELECT h.start, r.status, r.failure_type,
           sum(r.count) AS count, sum(r.partial_runs) AS partial_runs,
           sum(r.partial_items) AS partial_items, sum(r.empty_runs) AS empty_runs,
           sum(r.retries) AS retries, sum(r.early_retries) AS early_retries,
           sum(r.switched) AS switched, sum(r.avoided_retries) AS avoided_retries
    FROM hours h
    JOIN dashboard_runrollup r ON r.hour >= h.start AND r.hour < h.start + interval '6 hours'
    GROUP BY 1, 2, 3
)
SELECT count(*) FROM expected e
FULL JOIN dashboard_sixhourrollup s USING (start, status, failure_type)
WHERE (e.count, e.partial_runs, e.partial_items, e.empty_runs, e.retries, e.early_retries,
       e.switched, e.avoided_retries)
      IS DISTINCT FROM
      (s.count, s.partial_runs, s.partial_items, s.empty_runs, s.retries, s.early_retries,
       s.switched, s.avoided_retries)
   OR s.phase IS DISTINCT FROM extract(hour FROM e.start AT TIME ZONE 'UTC')::int % 6
"""
WASTED_AGAINST_HOURS = """
WITH hours AS (
    SELECT generate_series(min(hour) - interval '5 hours',
                           (SELECT max(start) FROM dashboard_sixhourrollup), interval '1 hour')
           AS start
    FROM dashboard_runrollup
), expected AS (
    SELECT h.start, r.failure_type, r.source, sum(r.retries) AS retries
    FROM hours h
    JOIN dashboard_runrollup r ON r.hour >= h.start AND r.hour < h.start + interval '6 hours'
    WHERE r.status IN ('failed', 'escalated') AND r.retries > 0
    GROUP BY 1, 2, 3
)
SELECT count(*) FROM expected e
FULL JOIN dashboard_sixhourwastedretries s USING (start, failure_type, source)
WHERE e.retries IS DISTINCT FROM s.retries
"""


@pytest.fixture(scope="module")
def benchmark_run() -> Iterator[tuple[str, str]]:
    """(database URL, output) of one small benchmark run."""
    url, out = run_benchmark(
        "dashboard.py",
        *("--runs", "3000", "--current-hour", "300", "--repeat", "2", "--keep-database"),
        suffix="_dash_smoke",
        timeout=300,
    )
    yield url, out
    parts = urlsplit(url)
    with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{parts.path.strip("/")}" WITH (FORCE)')


@pytest.mark.slow
def test_the_dashboard_benchmark_loads_and_times_every_page(benchmark_run):
    _, out = benchmark_run
    assert "COPY 2,700 runs" in out and "rollups:" in out, out
    assert "current hour: COPY 300 runs through the count triggers" in out
    assert "baselines: SELECT 1 round trip" in out and "load average before timing:" in out
    assert "load average before starting:" in out and "a signature at insert:" in out
    assert "failure groups:" in out and "periodic fold" in out
    pages = (
        "overview (1 h)",
        "overview (24 h)",
        "overview (7 d)",
        "runs: failed timeouts, 24 h",
        "runs: all",
        "  its total (htmx, once shown)",  # what the list defers is timed too
        "runs: page 50",
        "runs: search, common word, 24 h",
        "run detail",
        "workflows list",
        "workflow detail",
        "review queue (open, facets)",
        "review queue: grouped",
        "  a group's form (htmx, on opening)",
        "review item (mid-queue)",
        "policies",
        "search: common word",
        "search: a run's id",
        "/metrics",
        "GET /api/v1/runs",
    )
    for page in pages:
        line = next((x for x in out.splitlines() if x.startswith(page)), "")
        # p50, p95, p99, SQL and the ratios (the 50 ms target is for the full-size run)
        assert len(line[38:].split()) >= 8 and "x" in line, out


@pytest.mark.slow
def test_the_loaded_six_hour_rollups_equal_the_hourly_ones(benchmark_run):
    url, _ = benchmark_run
    with psycopg.connect(url) as conn:
        newest, last_hour, now_hour = conn.execute(
            "SELECT (SELECT max(start) FROM dashboard_sixhourrollup),"
            " (SELECT max(hour) FROM dashboard_runrollup), date_trunc('hour', now())"
        ).fetchone()
        # The newest complete block is there, and no block that is not complete yet.
        assert last_hour - timedelta(hours=5) <= newest <= now_hour - timedelta(hours=6)
        assert conn.execute(BLOCKS_AGAINST_HOURS).fetchone()[0] == 0
        assert conn.execute(WASTED_AGAINST_HOURS).fetchone()[0] == 0


def test_the_sql_replay_goes_on_past_a_count_cancelled_at_its_budget(postgres, monkeypatch):
    """A page's runs total counts inside a savepoint under a statement timeout, and falls back
    to an estimate when PostgreSQL cancels it. Its replay must do the same: roll back to the
    savepoint and go on, not fail on the page's recorded RELEASE in an aborted transaction."""
    path = ROOT / "benchmarks" / "dashboard.py"
    spec = importlib.util.spec_from_file_location("dashboard_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # its dataclasses look themselves up
    # As a script it imports its sibling `machine` from its own folder (for the time of this
    # test only: the folder also holds a dashboard.py, which must not stand for the app's).
    monkeypatch.syspath_prepend(str(path.parent))
    spec.loader.exec_module(bench)
    statements = [
        'SAVEPOINT "bench_s1"',
        "SELECT set_config('statement_timeout', '20ms', true)",
        "SELECT pg_sleep(2)",  # cancelled after 20 ms
        'RELEASE SAVEPOINT "bench_s1"',
        "SELECT 1",
    ]
    assert bench.replay_ms(statements) < 1500


def test_pages_chosen_by_a_word_of_their_label_keep_their_totals(monkeypatch):
    path = ROOT / "benchmarks" / "dashboard.py"
    spec = importlib.util.spec_from_file_location("dashboard_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)
    monkeypatch.syspath_prepend(str(path.parent))
    spec.loader.exec_module(bench)
    pages = [
        ("runs: all", "/runs/", {}),
        ("  its total", "/runs/total/", {}),
        ("review queue (open, facets)", "/review/", {}),
        ("Failure group detail", "/groups/1/", {}),
        ("  its total", "/runs/total/?group=1", {}),
    ]
    chosen = bench.chosen(pages, ["group DETAIL", "queue"])
    assert [path for _, path, _ in chosen] == ["/review/", "/groups/1/", "/runs/total/?group=1"]
    assert bench.chosen(pages, None) == pages


def test_the_row_cost_mode_prints_each_rows_cost_and_its_ratio_without_a_database():
    done = subprocess.run(
        [sys.executable, "benchmarks/dashboard.py", "--row-cost", "60", "--repeat", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": "sqlite:////nonexistent/never-opened.db"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("load average (1, 5, 15 min): ")
    rows = {}
    for line in done.stdout.splitlines():
        name, _, figures = line.rpartition("row ")
        if name in ("runs list ", "review queue "):
            rows[name.strip()] = [float(x) for x in figures.split()]
    assert set(rows) == {"runs list", "review queue"}
    for tag, template, ratio in rows.values():
        assert tag > 0 and template > 0 and ratio == pytest.approx(tag / template, abs=0.01)
