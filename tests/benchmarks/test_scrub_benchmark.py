"""Smoke test of benchmarks/scrub.py: a small batch through the three scrubbers, with ratios."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "scrub.py"


def test_the_scrub_benchmark_prints_each_scrubber_against_the_baseline(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = importlib.util.spec_from_file_location("scrub_benchmark", SCRIPT)
    assert spec and spec.loader
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)

    assert benchmark.main(["--runs", "50", "--repeat", "1", "--forms", "10"]) == 0

    out = capsys.readouterr().out
    assert out.startswith("load average (1, 5, 15 min) at the start: ")
    assert "50-run batch, one run in 50 with a secret, best of 1" in out
    for name in ("server (RE2)", "client (re)"):
        assert re.search(rf"^{re.escape(name)} +[\d.]+ +([\d.]+x|n/a)$", out, re.M), out
    assert re.search(r"^baseline +[\d.]+ +1\.00x$", out, re.M) or "no ratio" in out, out
    assert re.search(r"the secret corpus, \d+ forms as text, once", out), out
