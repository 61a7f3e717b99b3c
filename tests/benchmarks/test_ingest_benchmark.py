"""Smoke test of benchmarks/ingest.py: a small run end to end against PostgreSQL.

It skips on SQLite locally and fails in CI when PostgreSQL is missing (require_service). The
benchmark gets its own database, named after the test database URL's with a "_bench" suffix, and
drops it at the end.
"""

from __future__ import annotations

import re

import pytest

from tests.benchmarks.smoke import run_benchmark


@pytest.mark.slow
def test_the_ingest_benchmark_prints_batches_and_both_servers_single_report_table():
    _, out = run_benchmark("ingest.py", "--quick", suffix="_bench", timeout=600)
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
