"""Own-runs benchmark: a token without `read:all` lists its own runs among a million of others'.

    .venv/bin/python benchmarks/own_runs.py [--others 1000000] [--days 28] [--repeat 7]
                                            [--database-url …] [--skip-load] [--keep-database]

Against PostgreSQL (DATABASE_URL, default postgres://postgres@127.0.0.1:5432/failsight_own_bench):
creates the database if missing, migrates it and COPYs --others runs of another token (the
dashboard benchmark's mix of runs, half of them in that token's workflows) over --days, with the
run table's indexes set aside and built again after. The measured token owns 10 runs spread
over the same days: 8 it reported (4 of them in the workflow it started) and 2 a subagent's
token reported into its workflow; every 20th run of the other token and 4 of the measured
token's have a review item.

Timed through the API in process (django.test.Client: routing, authentication, the queries and
the JSON), median of --repeat after one warm-up, each beside the same request by a `read:all`
token of the same project (its first page of 50 of everyone's runs, measured in the same run):

- `GET /api/v1/runs` (the first page), with `?status=failed`, and the second page of a
  `limit=5` listing (a cursor);
- `GET /api/v1/runs/export?format=jsonl` (every own run);
- `GET /api/v1/reviews?all_tokens=true` (review items of its runs and workflows).

Target: each within TARGET (1.5x) of its baseline, whatever the others' runs. It prints the load
average first (the machines are shared), and for the own list the plan's index scans and the
rows its filters removed (EXPLAIN ANALYZE). The database is dropped at the end (unless
--keep-database; --skip-load then reuses it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from datetime import UTC, datetime, timedelta

import dashboard_data as loader

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/failsight_own_bench"
TARGET = 1.5
OWN = 10
REVIEW_EVERY = 20
PARTITION = re.compile(r"^orchestrator_run_(p\d{8}|default)_")


def load(others: int, days: int) -> dict[str, str]:
    """Load the runs; return the secrets of the tokens {"own": …, "all": …}."""
    from django.db import connection

    from orchestrator.models import ApiToken, ReviewItem, Run, Workflow

    loader.DAYS = days
    now = datetime.now(UTC)
    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE orchestrator_reviewitem, orchestrator_run, orchestrator_runkey, "
            "orchestrator_workflow RESTART IDENTITY CASCADE"
        )
    ApiToken.objects.filter(name__startswith="bench-").delete()
    other, _ = ApiToken.issue("bench-other")
    subagent, _ = ApiToken.issue("bench-subagent")
    own, own_secret = ApiToken.issue("bench-own")
    _, all_secret = ApiToken.issue("bench-reader", scopes=["read:all"])
    loader.run_partitions(now, days + 1)
    workflows = max(10, others // 50)
    started = time.perf_counter()
    rows = ({**row, "token_id": other.pk} for row in loader.workflow_rows(workflows, now))
    loader.copy_rows(Workflow, rows)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('orchestrator_workflow', 'id'), %s)", [workflows]
        )
    mine = Workflow.objects.create(name="bench own workflow", token=own)
    restore = loader.set_indexes_aside()
    span = (now - timedelta(days=days), now - timedelta(minutes=1))
    runs = loader.run_rows(range(1, others + 1), others, workflows, span, loader.Tasks())
    n = loader.copy_rows(Run, others_runs(runs, other.pk))
    with connection.cursor() as cursor:
        for statement in restore:
            cursor.execute(statement)
    seconds = time.perf_counter() - started
    print(f"COPY {n:,} runs of another token over {days} days: {seconds:.1f} s")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('orchestrator_run', 'id'), "
            "(SELECT max(id) FROM orchestrator_run))"
        )
    print(f"review items of the other token's runs: {others_reviews(others, other.pk, span):,}")
    for i in range(OWN):
        created = span[0] + (span[1] - span[0]) * (i + 0.5) / OWN
        token = subagent if i >= OWN - 2 else own
        run = Run.objects.create(
            token=token,
            workflow=mine if i % 2 or token is subagent else None,
            agent="bench-own",
            source="web_search",
            status="failed" if i % 3 == 0 else "succeeded",
            failure_type="timeout" if i % 3 == 0 else None,
            created_at=created,
            started_at=created,
            finished_at=created + timedelta(seconds=1),
        )
        if i % 3 == 0:
            ReviewItem.objects.create(
                run=run, token=run.token, workflow=run.workflow, reason="bench", created_at=created
            )
    with connection.cursor() as cursor:
        for table in ("orchestrator_run", "orchestrator_workflow", "orchestrator_reviewitem"):
            # As autovacuum leaves an insert-only table: statistics and the visibility map.
            cursor.execute(f"VACUUM ANALYZE {table}")
    return {"own": own_secret, "all": all_secret}


def others_reviews(others: int, token_id: int, span: tuple[datetime, datetime]) -> int:
    """A review item on every REVIEW_EVERY-th run of the other token (as the loader made them)."""
    from django.db import connection

    from orchestrator.models import ReviewItem

    first, last = span
    rows = (
        {
            "id": i // REVIEW_EVERY,
            "run_id": i,
            "token_id": token_id,
            "reason": "bench",
            "created_at": first + (last - first) * (i / (others + 1)),
        }
        for i in range(REVIEW_EVERY, others + 1, REVIEW_EVERY)
    )
    n = loader.copy_rows(ReviewItem, rows)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT setval(pg_get_serial_sequence('orchestrator_reviewitem', 'id'), %s)",
            [max(1, n)],
        )
    return n


def others_runs(rows, token_id: int):
    """The loader's runs, as the other token's; every second one outside its workflows."""
    for row in rows:
        row["token_id"] = token_id
        if row["id"] % 2:
            row["workflow_id"] = None
        yield row


def plan_of(client, path: str, headers: dict[str, str]) -> str:
    """Per query of the request on the run table: its time, index scans and the rows its
    filters removed (EXPLAIN ANALYZE)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        client.get(path, **headers)
    found = []
    for sql in (q["sql"] for q in queries if 'FROM "orchestrator_run"' in q["sql"]):
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
            plan = cursor.fetchone()[0]
        plan = json.loads(plan) if isinstance(plan, str) else plan
        scans: dict[str, int] = {}
        removed = 0
        nodes = [plan[0]["Plan"]]
        while nodes:
            node = nodes.pop()
            removed += node.get("Rows Removed by Filter", 0) * node.get("Actual Loops", 1)
            if "Index Name" in node:
                # A partition's index is named after its partition: counted under the rest.
                name = PARTITION.sub("", node["Index Name"])
                scans[name] = scans.get(name, 0) + 1
            nodes.extend(node.get("Plans", []))
        listed = ", ".join(f"{name} x{count}" for name, count in sorted(scans.items()))
        found.append(
            f"\n  {plan[0]['Execution Time']:.1f} ms in SQL; index scans: {listed or 'none'}; "
            f"rows removed by filter: {removed:,}"
        )
    return "".join(found)


def measure(secrets: dict[str, str], repeat: int) -> bool:
    from django.test import Client

    client = Client()
    own = {"HTTP_AUTHORIZATION": f"Bearer {secrets['own']}"}
    everyone = {"HTTP_AUTHORIZATION": f"Bearer {secrets['all']}"}

    def get(path: str, headers: dict[str, str]):
        def run() -> bytes:
            response = client.get(path, **headers)
            assert response.status_code == 200, (path, response.status_code)
            if response.streaming:
                return b"".join(response.streaming_content)
            return response.content

        return run

    first = json.loads(get("/api/v1/runs?limit=5", own)())
    assert len(first["items"]) == 5 and first["next_cursor"], first
    page2 = f"/api/v1/runs?limit=5&cursor={first['next_cursor']}"
    listed = json.loads(get("/api/v1/runs", own)())["items"]
    assert len(listed) == OWN, f"the own list holds {len(listed)} runs, not {OWN}"
    exported = get("/api/v1/runs/export?format=jsonl", own)().splitlines()
    assert len(exported) == OWN, f"the export holds {len(exported)} runs, not {OWN}"
    baseline = loader.timed(get("/api/v1/runs", everyone), repeat)
    cases = [
        ("GET /runs (own, first page)", "/api/v1/runs"),
        ("GET /runs?status=failed (own)", "/api/v1/runs?status=failed"),
        ("GET /runs?limit=5, second page (own)", page2),
        ("GET /runs/export?format=jsonl (own)", "/api/v1/runs/export?format=jsonl"),
        ("GET /reviews?all_tokens=true (own)", "/api/v1/reviews?all_tokens=true"),
    ]
    print(
        f"\nbaseline: GET /runs by a read:all token (50 of everyone's runs): "
        f"{1000 * baseline:.1f} ms (median of {repeat})"
    )
    print(f"\n{'request':40} {'time':>9} {'ratio':>7}")
    ok = True
    for label, path in cases:
        seconds = loader.timed(get(path, own), repeat)
        ratio = seconds / baseline
        flag = "" if ratio <= TARGET else f"  OVER THE {TARGET}x TARGET"
        ok = ok and ratio <= TARGET
        print(f"{label:40} {1000 * seconds:6.1f} ms {ratio:6.2f}x{flag}")
    print(f"\nthe own list's plan: {plan_of(client, '/api/v1/runs', own)}")
    print(f"the read:all list's plan: {plan_of(client, '/api/v1/runs', everyone)}")
    return ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--others", type=int, default=1_000_000, help="Runs of another token")
    parser.add_argument("--days", type=int, default=28, help="Span of the loaded runs")
    parser.add_argument("--repeat", type=int, default=7)
    loader.database_options(parser, DEFAULT_URL)
    args = parser.parse_args(argv)
    with loader.benchmark_database(loader.postgres_url(parser, args), args.keep_database):
        secrets = reissue() if args.skip_load else load(args.others, args.days)
        ok = measure(secrets, args.repeat)
        print(f"\nload average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"\nwithin {TARGET}x of the read:all list" if ok else f"\nOVER {TARGET}x")
    return 0


def reissue() -> dict[str, str]:
    """New secrets for the loaded tokens (secrets are never stored)."""
    from orchestrator.models import ApiToken

    secrets = {}
    for key, name in (("own", "bench-own"), ("all", "bench-reader")):
        token = ApiToken.objects.get(name=name)
        secret = ApiToken.PREFIX + os.urandom(24).hex()
        ApiToken.objects.filter(pk=token.pk).update(hashed=ApiToken.hash_secret(secret))
        secrets[key] = secret
    return secrets


if __name__ == "__main__":
    sys.exit(main())
