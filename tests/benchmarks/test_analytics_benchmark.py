"""Smoke test of benchmarks/analytics.py: a tiny load, the dry run and the efficacy matrix timed
against their baselines, on PostgreSQL (its own database, <DATABASE_URL's name>_analytics_smoke).

Skipped on SQLite locally, failed in CI without PostgreSQL (require_service).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_service
from tests.services import bench_database_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_analytics_benchmark_times_the_dry_run_and_the_matrix():
    url = bench_database_url("_analytics_smoke")
    require_service(url is not None, "PostgreSQL (DATABASE_URL=postgres://…)")
    command = ["benchmarks/analytics.py", "--rows", "2000", "--repeat", "1", "--database-url", url]
    done = subprocess.run(
        [sys.executable, *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "load average before starting:" in out and "COPY 2,000 runs" in out, out
    for figure in ("dry run (proposed vs current)", "switch-efficacy matrix (28 d)"):
        line = next((x for x in out.splitlines() if x.startswith(figure)), "")
        assert " ms " in line and "x  count(*)" in line, out
    assert "dry run under 2 s" in out
