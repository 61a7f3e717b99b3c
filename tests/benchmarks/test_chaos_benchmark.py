"""Smoke test of benchmarks/chaos.py at its smallest: it runs, prints its figures and the load
average, and every invariant it prints is zero (tests/orchestrator/test_chaos.py runs it at the
suite's size and checks each scenario)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_service
from tests.services import available

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_chaos_benchmark_prints_its_figures_and_keeps_its_invariants():
    require_service(available(), "PostgreSQL's server programs and redis-server")
    command = [sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--workflows", "4"]
    command += ["--kills", "1", "--scenarios", "sigkill,broker", "--seed", "3"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"load average \(1, 5, 15 min\) before: [\d.]+, [\d.]+, [\d.]+", out)
    rows = re.findall(r"^(baseline|sigkill|broker)\s+(\d+)\s+(\d+)\s+([\d.]+) s", out, re.M)
    assert [row[0] for row in rows] == ["baseline", "sigkill", "broker"]
    invariants = out.split("invariants (each must be 0):", 1)[1].split("context:", 1)[0]
    counts = re.findall(r"^\s+([a-z ]+?)\s+(\d+)$", invariants, re.M)
    assert len(counts) == 8 and all(n == "0" for _, n in counts), invariants
