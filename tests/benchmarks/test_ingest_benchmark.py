"""Smoke test of benchmarks/ingest.py: a small run end to end against PostgreSQL.

It skips on SQLite locally and fails in CI when PostgreSQL is missing (require_service). The
benchmark gets its own database, named after the test database URL's with a "_bench" suffix, and
drops it at the end.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_service
from tests.services import bench_database_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_ingest_benchmark_prints_batches_and_both_servers_single_report_table():
    url = bench_database_url("_bench")
    require_service(url is not None, "PostgreSQL (DATABASE_URL=postgres://…)")
    done = subprocess.run(
        [sys.executable, "benchmarks/ingest.py", "--quick", "--database-url", url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(r"^POST /api/v1/runs/batch +[\d,]+ runs/s", out, re.M), out
    assert re.search(r"^COPY orchestrator_run x4 +[\d,]+ rows/s", out, re.M), out
    assert re.search(r"load average [\d.]+, pure-Python loop [\d.]+ ms", out), out
    # Each rate offered to the server as shipped, then to the baseline, with the ratios.
    rows = re.findall(r"^  (\S.*?)?\s+(shipped|baseline)\s+([\d,]+)\s", out, re.M)
    labels = [(label.strip(), server) for label, server, _ in rows]
    assert labels == [
        ("100/s", "shipped"),
        ("", "baseline"),
        ("200/s", "shipped"),
        ("", "baseline"),
        (labels[4][0], "shipped"),
        ("", "baseline"),
    ], out
    assert labels[4][0].startswith("2 x capacity ("), out
    assert re.search(r"shipped at twice its capacity .* client timeouts \d+ \(goal 0\)", out), out
