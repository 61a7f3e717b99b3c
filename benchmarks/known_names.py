"""Known-names benchmark: the runs page's source and agent suggestions within some projects,
against every project's, at 1,000,000 runs.

    .venv/bin/python benchmarks/known_names.py [--rows 1000000] [--days 7] [--repeat 5]
                                               [--database-url …] [--skip-load] [--keep-database]

Against PostgreSQL (DATABASE_URL, default postgres://postgres@127.0.0.1:5432/failsight_known_
names_bench): creates the database if missing, migrates it and loads the runs with COPY through
the dashboard benchmark's loader, spread over three projects: the default one (70 %), `alpha`
(10 %, the default's names) and `bravo` (20 %, names of its own, which an operator of the other
two never sees and the skip scan within them steps over run by run). It then times, median of
--repeat after one warm-up, each column's names (`dashboard.filters.known_names`, uncached)
for every project (the baseline, one index entry per name), and within (default, alpha),
(alpha) and (bravo) (`names_within`: the skip scan within a budget, else the latest runs'
names), and alpha's skip scan without the budget, each as a ratio to the baseline measured in
the same run.

It prints the load average first (the machines are shared). The database is dropped at the end
(unless --keep-database; --skip-load then reuses it).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from datetime import UTC, datetime, timedelta

import dashboard_data as loader

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/failsight_known_names_bench"
SHARES = (("default", 0.70), ("alpha", 0.10), ("bravo", 0.20))


def project_rows(count: int, workflows: int, now: datetime, ids: dict[str, int]):
    """The loader's runs, each given a project; bravo's agents and sources renamed its own."""
    rng = random.Random(5)
    span = (now - timedelta(days=loader.DAYS), now - timedelta(minutes=1))
    for row in loader.run_rows(range(1, count + 1), count, workflows, span, loader.Tasks()):
        roll, name = rng.random(), "default"
        for candidate, share in SHARES:
            if roll < share:
                name = candidate
                break
            roll -= share
        row["project_id"] = ids[name]
        if name == "bravo":
            row["agent"], row["source"] = f"bravo-{row['agent']}", f"bravo_{row['source']}"
        yield row


def load(rows: int, days: int) -> dict[str, int]:
    from django.db import connection

    from orchestrator.models import DEFAULT_PROJECT_ID, Project, Run, Workflow

    loader.DAYS = days
    now = datetime.now(UTC)
    workflows = max(10, rows // 50)
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE orchestrator_reviewitem, orchestrator_run, orchestrator_runkey, "
            "orchestrator_workflow RESTART IDENTITY CASCADE"
        )
    ids = {"default": DEFAULT_PROJECT_ID}
    for slug in ("alpha", "bravo"):
        ids[slug] = Project.objects.get_or_create(slug=slug, defaults={"name": slug})[0].pk
    loader.run_partitions(now, days + 1)
    started = time.perf_counter()
    loader.copy_rows(Workflow, loader.workflow_rows(workflows, now))
    n = loader.copy_rows(Run, project_rows(rows, workflows, now, ids))
    print(f"COPY {n:,} runs over {days} days: {time.perf_counter() - started:.1f} s")
    with connection.cursor() as cursor:
        top = "(SELECT max(id) FROM orchestrator_run)"
        cursor.execute(f"SELECT setval(pg_get_serial_sequence('orchestrator_run', 'id'), {top})")
        # As autovacuum leaves an insert-only table: statistics and the visibility map.
        cursor.execute("VACUUM ANALYZE orchestrator_run")
    return ids


def measure(repeat: int, ids: dict[str, int]) -> None:
    from dashboard import filters

    scopes = {
        "default + alpha": (ids["default"], ids["alpha"]),
        "alpha": (ids["alpha"],),
        "bravo": (ids["bravo"],),
    }
    print(f"\n{'names':26} {'time':>9} {'baseline':>10} {'ratio':>7}  names found")
    for column in ("source", "agent"):
        base = loader.timed(lambda c=column: filters.known_names(c, fresh=True), repeat)
        every = len(filters.known_names(column, fresh=True))
        print(f"{column + ', every project':26} {1000 * base:7.1f} ms {'':18}  {every}")
        for label, scope in scopes.items():
            seconds = loader.timed(
                lambda c=column, s=scope: filters.names_within(c, s, fresh=True), repeat
            )
            names, complete = filters.names_within(column, scope, fresh=True)
            how = "" if complete else f" (over budget: of the last {filters.LATEST_RUNS_NAMED})"
            print(
                f"{column + ', ' + label:26} {1000 * seconds:7.1f} ms {1000 * base:7.1f} ms"
                f" {seconds / base:6.1f}x  {len(names)}{how}"
            )
        scan = loader.timed(lambda c=column: filters._skip_scan(c, 501, scopes["alpha"]), 1)
        print(
            f"{column + ', alpha, no budget':26} {1000 * scan:7.1f} ms {1000 * base:7.1f} ms"
            f" {scan / base:6.1f}x"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=7, help="Span of the loaded runs")
    parser.add_argument("--repeat", type=int, default=5)
    loader.database_options(parser, DEFAULT_URL)
    args = parser.parse_args(argv)
    with loader.benchmark_database(loader.postgres_url(parser, args), args.keep_database):
        if args.skip_load:
            from orchestrator.models import Project

            ids = dict(Project.objects.values_list("slug", "pk"))
        else:
            ids = load(args.rows, args.days)
        measure(args.repeat, ids)
    return 0


if __name__ == "__main__":
    sys.exit(main())
