"""Smoke test: the API docs benchmark runs one round in Chromium against the server as shipped
and prints its figures beside its baseline."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from tests.conftest import require_service

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "docs_page.py"


@pytest.mark.slow
def test_the_docs_benchmark_prints_both_visits_beside_its_baseline(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = importlib.util.spec_from_file_location("docs_page_benchmark", SCRIPT)
    assert spec and spec.loader
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    require_service(benchmark.CHROMIUM.exists(), f"Debian's chromium ({benchmark.CHROMIUM})")

    assert benchmark.main(["--quick"]) == 0

    out = capsys.readouterr().out
    assert out.startswith("load average (1, 5, 15 min) at the start: ")
    figures = {}
    for name in ("baseline", "docs, first visit", "docs, returning visit"):
        found = re.search(rf"^{re.escape(name)}( \(.*\))?: (\d+) ms$", out, re.M)
        assert found, name
        figures[name] = int(found.group(2))
    assert all(ms > 0 for ms in figures.values()), figures
    ratio = re.search(r"ratio first visit / baseline: ([\d.]+)x", out)
    assert ratio and float(ratio.group(1)) > 0
    # The waterfall of the first visit: the operations listed from the HTML itself (rendered on
    # the server: no UI bundle, no OpenAPI document fetched by a script).
    assert re.search(r"operations listed +\d+ ms", out)
    assert "UI's script and styles" not in out and "the document fetched" not in out
    assert re.search(r"first visit (under|NOT under) 1000 ms", out)
