"""Smoke test: the slow-clients benchmark runs both phases, small and short, against the server
as shipped, and prints its ratio and the probes' figures."""

from __future__ import annotations

import json

import pytest

from tests.benchmarks.smoke import run_benchmark


@pytest.mark.slow
def test_the_slow_clients_benchmark_prints_its_ratio_and_the_probes():
    options = ("--rate", "20", "--seconds", "3", "--slow", "10", "--timeout", "10")
    _, out = run_benchmark("slow_clients.py", *options, suffix="_slow", timeout=600)
    first, *lines = out.splitlines()
    result = json.loads(first)
    for phase in ("baseline", "with_slow_clients"):
        figures = result[phase]
        assert figures["sent"] == 60 and figures["ok"] + figures["failed"] == 60, figures
        assert set(figures["probes"]) == {"/healthz", "/readyz"}
        assert all(p["asked"] > 0 for p in figures["probes"].values())
    assert result["slow_clients"] == 20 and result["p99_ratio"] > 0
    assert lines[-1].startswith("p99 with 20 slow clients / without: ")
