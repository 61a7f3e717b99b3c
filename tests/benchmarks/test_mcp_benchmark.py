"""Smoke test: the MCP benchmark times both tools and their REST twins against the server as
shipped and prints each tool's ratio to its twin."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "mcp_calls.py"


@pytest.mark.slow
def test_the_mcp_benchmark_prints_each_tool_beside_its_rest_twin(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = importlib.util.spec_from_file_location("mcp_benchmark", SCRIPT)
    assert spec and spec.loader
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)

    assert benchmark.main(["--quick"]) == 0

    out = capsys.readouterr().out
    assert out.startswith("load average (1, 5, 15 min) at the start: ")
    for tool in ("get_policy", "list_resolutions"):
        row = re.search(rf"^{tool} +([\d.]+) +([\d.]+) +([\d.]+) +([\d.]+)$", out, re.M)
        assert row, tool
        assert all(float(ms) > 0 for ms in row.groups()), row.groups()
        ratio = re.search(rf"^ratio {tool} / GET /api/v1/\w+ \(p50\): ([\d.]+)x$", out, re.M)
        assert ratio and float(ratio.group(1)) > 0, tool
