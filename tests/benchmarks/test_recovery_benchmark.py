"""Smoke test of benchmarks/recovery.py on a small workload: it runs its three arms, in their
order, and Failsight meets the targets that do not depend on the workload's size."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def figures(stdout: str) -> tuple[list[str], dict[str, tuple[float, float, float]]]:
    """The table's arms (its header) and rows: {label: (blind, status-aware, Failsight)}."""
    lines = stdout.splitlines()
    header = next(line for line in lines if line.startswith("metric"))
    rows = {}
    for line in lines:
        parts = line.rsplit(None, 3)
        if len(parts) == 4 and all(p.replace(".", "").isdigit() for p in parts[1:]):
            rows[parts[0].strip()] = tuple(float(p) for p in parts[1:])
    return header.split()[1:], rows


@pytest.mark.slow
@pytest.mark.serial  # a timed ratio (at most 1.5)
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
    arms, rows = figures(out.stdout)
    assert arms == ["blind", "status-aware", "Failsight"]
    blind, aware, failsight = 0, 1, 2
    early = rows["calls inside a Retry-After window (any query's)"]
    assert early[failsight] == 0 < early[aware] <= early[blind]
    assert "the product's early-retries set counts 0 (target 0)" in out.stdout
    assert rows["silent holes"][failsight] == 0
    kept, total = rows["partial results kept"], rows["partial results gathered (one total)"]
    assert kept[failsight] == total[failsight] > kept[aware]
    wasted, dollars = rows["wasted calls (could not succeed)"], rows["dollars wasted"]
    assert wasted[failsight] == dollars[failsight] == 0 < wasted[aware] < wasted[blind]
    assert 0 < dollars[aware] < dollars[blind]
    # Dollars come from the price table at each call's tokens: every arm's calls cost something.
    assert all(spent > 0 for spent in rows["dollars spent"])
    # The status-aware arm never retries a failure its classifier calls permanent, blind does.
    signal = rows["retries against a 'retry cannot help' signal"]
    assert signal[failsight] == signal[aware] == 0 < signal[blind]
    assert "its futile-retries set counts 0 (target 0)" in out.stdout
    # Failsight refreshes expired tokens; neither other arm can.
    refreshes = rows["credential refreshes"]
    assert refreshes[blind] == refreshes[aware] == 0 < refreshes[failsight]
    # Every workflow settles or waits only on a human by itself; the operator's answers settle all.
    assert rows["workflows neither (at that time)"] == (0, 0, 0)
    assert rows["workflows not settled at the end"] == (0, 0, 0)
    assert rows["review items answered by the operator"] == rows["review items opened"]
    # Hours of delay are one sum of two parts in every arm.
    hours = rows["hours of delay"]
    parts = zip(rows["of topics answered in full"], rows["of topics left to a person"], strict=True)
    assert [round(a + b, 2) for a, b in parts] == list(hours)
    # Settled or waiting only on a human within 1.5 times the providers' waits on the preferred
    # paths, which is no lower bound and is not called one.
    assert "lower bound:" not in out.stdout
    ratio = re.search(r"waits only on a human at [\d.]+ s = ([\d.]+)x it", out.stdout)
    assert ratio is not None and float(ratio.group(1)) <= 1.5, ratio
    # Every goal is printed with whether it is met; those independent of the workload's size met.
    goals = dict(re.findall(r"^goal: (.+?): .*, (met|NOT met)$", out.stdout, re.M))
    assert len(goals) == 5, out.stdout
    assert goals["Failsight wasted calls 0"] == "met"
    assert goals["Failsight calls inside a Retry-After window 0"] == "met"
    assert goals["Failsight partial results kept 100 %"] == "met"
