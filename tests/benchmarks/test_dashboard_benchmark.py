"""Smoke test of benchmarks/dashboard.py: a tiny load and every page timed, on PostgreSQL.

Skipped on SQLite locally, failed in CI without PostgreSQL (require_service). The benchmark uses
its own database, failsight_dash_smoke (not the full run's failsight_dash_bench), on the server
of DATABASE_URL.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.conftest import require_service

ROOT = Path(__file__).resolve().parents[2]


def bench_database_url() -> str | None:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        return None
    return urlunsplit(urlsplit(url)._replace(path="/failsight_dash_smoke"))


@pytest.mark.slow
def test_the_dashboard_benchmark_loads_and_times_every_page():
    url = bench_database_url()
    require_service(url is not None, "PostgreSQL (DATABASE_URL=postgres://…)")
    done = subprocess.run(
        [
            sys.executable,
            "benchmarks/dashboard.py",
            "--rows",
            "3000",
            "--repeat",
            "2",
            "--database-url",
            url,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "COPY 3,000 runs" in out and "rollups:" in out, out
    for page in ("overview (24 h)", "runs: failed timeouts, 24 h", "run detail (a retry)"):
        line = next((x for x in out.splitlines() if x.startswith(page)), "")
        assert " ms " in line, out  # timed (the 100 ms target is for the full-size run)
