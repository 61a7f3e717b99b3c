"""Smoke test: the client benchmark runs its quick size and prints its figures."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "client.py"


@pytest.mark.slow
def test_the_client_benchmark_prints_track_beside_a_bare_call(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = importlib.util.spec_from_file_location("client_benchmark", SCRIPT)
    assert spec and spec.loader
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)

    assert benchmark.main(["--quick"]) == 0

    out = capsys.readouterr().out
    assert out.startswith("load average (1, 5, 15 min) at the start: ")
    for label in ("bare function call", "track (background)", "track, failure", "strict=True"):
        assert label in out, label
    assert "ratio track / bare call (medians): " in out
    assert re.search(r"median track\(\) in the agent's thread: [\d.]+ µs", out)
    # Every run tracked reached the (stand-in) server: the reporting thread kept up.
    found = re.search(r"reporting thread: (\d+) of (\d+) runs stored, 0 lost", out)
    assert found and found.group(1) == found.group(2)
    assert "final flush done" in out
