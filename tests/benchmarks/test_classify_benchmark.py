"""Smoke test: the classify benchmark runs its quick selection of the corpus and prints its
figures."""

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
    assert out.startswith("load average (1, 5, 15 min) at the start: ")
    assert "classify µs" in out and "fail path µs" in out and "ratio" in out
    # cases of the test corpus, by their names there: a library's, a builtin's, a wrapper's
    assert "requests: 404 is resource_missing" in out
    assert "botocore S3: NoSuchKey is resource_missing" in out
    assert "socket: ConnectionRefusedError is transient" in out
    assert "agent: RuntimeError raised from a urllib 404 HTTPError" in out
    assert "categories other than the corpus expects" not in out
    assert "classifications per second over the corpus:" in out
    assert "plain HTTP status error:" in out and "(httpx: 404 is resource_missing)" in out
    assert "median ratio classify / failure path:" in out
    assert "median ratio, library only" in out and "median ratio, builtins only" in out
    assert "median ratio, wrapped only" in out
    # per library: the corpus's cases and how many classify as expected, all of them
    assert "library" in out and "cases  as expected" in out
    assert "\nparamiko " in out and "\nasyncio.TaskGroup " in out
    total = next(line for line in out.splitlines() if line.startswith("all "))
    cases, expected = total.split()[1:]
    assert cases == expected
