"""One run of a benchmark script for its smoke test, on its own PostgreSQL database (DATABASE_URL's
name with a suffix: `bench_database_url`). Skipped on SQLite locally, failed in CI without
PostgreSQL (require_service)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import require_service
from tests.services import ROOT, bench_database_url


def run_benchmark(script: str, *options: str, suffix: str, timeout: float) -> tuple[str, str]:
    """(database URL, standard output) of `benchmarks/<script> <options> --database-url …`,
    which must exit 0."""
    url = bench_database_url(suffix)
    require_service(url is not None, "PostgreSQL (DATABASE_URL=postgres://…)")
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script}", *options, "--database-url", url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return url, done.stdout
