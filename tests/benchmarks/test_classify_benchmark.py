"""Smoke test: the classify benchmark runs with a tiny N and prints its figures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "classify.py"


def test_the_classify_benchmark_prints_its_figures(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("classify_benchmark", SCRIPT)
    assert spec and spec.loader
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)

    assert benchmark.main(["--quick"]) == 0

    out = capsys.readouterr().out
    assert "classify µs" in out and "ratio" in out
    assert "builtins ConnectionRefusedError" in out
    assert "requests HTTPError 404" in out and "botocore DynamoDB ThrottlingException" in out
    assert "classifications per second over the corpus:" in out
    assert "plain HTTP status error:" in out
    assert "median ratio classify / failure path:" in out
    assert "median ratio, library only" in out and "median ratio, builtins only" in out
