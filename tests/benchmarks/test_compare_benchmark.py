"""Smoke test of benchmarks/compare.py: this tree against its own HEAD, one short round, against
PostgreSQL (skipped on SQLite locally, failed in CI without it). The git worktree it checks the
ref out into is gone afterwards."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.benchmarks.smoke import run_benchmark
from tests.services import ROOT


def worktrees() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.slow
def test_the_comparison_prints_each_figure_for_both_trees_with_its_ratio():
    _, out = run_benchmark("compare.py", "HEAD", "--quick", suffix="_cmp", timeout=900)
    assert re.search(r"^this tree against HEAD, 1 rounds alternated \(load average", out, re.M)
    for label in ("single report, CPU in process", "batches of 1,000, in process"):
        row = re.search(
            rf"^  {re.escape(label)} +([\d,.]+) \S+ +([\d,.]+) \S+ +([\d.]+)x", out, re.M
        )
        assert row, out
        ours, theirs, ratio = (float(v.replace(",", "")) for v in row.groups())
        assert ours > 0 and theirs > 0 and ratio == pytest.approx(ours / theirs, abs=0.01)
    assert re.search(r"^  open loop, served +[\d,.]+ /s", out, re.M), out
    assert re.search(r"^goals: single-report CPU <= 0.8 ms", out, re.M), out
    assert "failsight-compare-" not in worktrees()  # the ref's checkout removed
