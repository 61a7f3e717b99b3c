"""Smoke test of benchmarks/recovery.py on a small workload: it runs and meets its targets."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_recovery_benchmark_runs_and_meets_its_targets():
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "recovery.py"), "--tasks", "40"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {}
    for line in out.stdout.splitlines():
        parts = line.rsplit(None, 2)
        if len(parts) == 3 and all(p.replace(".", "").isdigit() for p in parts[1:]):
            rows[parts[0].strip()] = (float(parts[1]), float(parts[2]))
    assert rows["calls before Retry-After"][1] == 0
    assert rows["silent holes"][1] == 0
    assert rows["partial results preserved"][1] == rows["partial results gathered"][1]
    assert rows["wasted calls"][1] <= 0.03 * rows["wasted calls"][0]
    assert rows["workflows not settled"] == (0, 0)
    # A 501 or an x-should-retry: false is never retried by the product, by ground truth and by
    # its own futile-retries set; the blind arm retried them.
    assert rows["retries against the signal"][1] == 0
    assert "the product's futile-retries set counts 0 (target 0)" in out.stdout
