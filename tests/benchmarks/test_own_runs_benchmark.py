"""Smoke test of benchmarks/own_runs.py: a tiny load, a token's own runs listed, exported and
its review items read beside the read:all list, on PostgreSQL (its own database, <DATABASE_URL's
name>_own_smoke).

Skipped on SQLite locally, failed in CI without PostgreSQL (require_service).
"""

from __future__ import annotations

import re

import pytest

from tests.benchmarks.smoke import run_benchmark


@pytest.mark.slow
def test_the_own_runs_benchmark_times_a_tokens_own_lists_against_the_read_all_list():
    _, out = run_benchmark(
        "own_runs.py", "--others", "2000", "--repeat", "1", suffix="_own_smoke", timeout=180
    )
    assert "load average before starting:" in out and "COPY 2,000 runs" in out, out
    assert "baseline: GET /runs by a read:all token" in out, out
    for request in ("GET /runs (own, first page)", "GET /runs/export", "GET /reviews"):
        line = next((x for x in out.splitlines() if x.startswith(request)), "")
        assert re.search(r" ms +\d+\.\d\dx", line), out
    # Every query of the own list on the run table is explained (two: its ways of being own).
    assert out.count("rows removed by filter:") >= 3, out
