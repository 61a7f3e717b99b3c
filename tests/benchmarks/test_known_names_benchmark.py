"""Smoke test of benchmarks/known_names.py: a tiny load over three projects, each column's names
within some projects timed against every project's, on PostgreSQL (its own database,
<DATABASE_URL's name>_known_names_smoke).

Skipped on SQLite locally, failed in CI without PostgreSQL (require_service).
"""

from __future__ import annotations

import pytest

from tests.benchmarks.smoke import run_benchmark


@pytest.mark.slow
def test_the_known_names_benchmark_times_names_within_projects_against_every_projects():
    _, out = run_benchmark(
        "known_names.py",
        "--rows",
        "2000",
        "--repeat",
        "1",
        suffix="_known_names_smoke",
        timeout=180,
    )
    assert "load average before starting:" in out and "COPY 2,000 runs" in out, out
    lines = out.splitlines()
    for column in ("source", "agent"):
        every = next(x for x in lines if x.startswith(f"{column}, every project"))
        mine = next(x for x in lines if x.startswith(f"{column}, default + alpha"))
        theirs = next(x for x in lines if x.startswith(f"{column}, bravo"))
        assert " ms " in mine and "x  " in mine, out
        if "over budget" in mine + theirs:
            continue  # a loaded machine: the latest runs' names, not all of them
        # bravo's names are its own: the two scopes find as many names, every project both.
        found = [int(line.split()[-1]) for line in (every, mine, theirs)]
        assert found[0] == found[1] + found[2] and found[1] == found[2] > 0, out
        assert any(x.startswith(f"{column}, alpha, no budget") for x in lines), out
