"""Smoke test of benchmarks/analytics.py: a tiny load, the dry run and the efficacy matrix timed
against their baselines, on PostgreSQL (its own database, <DATABASE_URL's name>_analytics_smoke).

Skipped on SQLite locally, failed in CI without PostgreSQL (require_service).
"""

from __future__ import annotations

import pytest

from tests.benchmarks.smoke import run_benchmark


@pytest.mark.slow
def test_the_analytics_benchmark_times_the_dry_run_and_the_matrix():
    _, out = run_benchmark(
        "analytics.py", "--rows", "2000", "--repeat", "1", suffix="_analytics_smoke", timeout=120
    )
    assert "load average before starting:" in out and "COPY 2,000 runs" in out, out
    for figure in ("dry run (proposed vs current)", "switch-efficacy matrix (28 d)"):
        line = next((x for x in out.splitlines() if x.startswith(figure)), "")
        assert " ms " in line and "x  count(*)" in line, out
    assert "dry run under 2 s" in out
