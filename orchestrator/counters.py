"""Counters over the runs kept by PostgreSQL as append-only deltas, folded in the background.

A counter row updated by every report would serialise the writers on it; statement triggers append
deltas instead, which commit with the runs, so "folded counters + pending deltas" always agrees
with a live count. The triggers' SELECT is compiled from the live queries' expressions. SQLite
counts live.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connection, transaction
from django.db.models import Count, Expression, IntegerField, OuterRef, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce

from orchestrator.models import Run, RunSets, WorkflowCounter, WorkflowRunDelta

RUN_TABLE = Run._meta.db_table
# Set by a transaction whose deletes are retention: counts never go down as old runs are pruned.
RETENTION_SETTING = "failsight.retention"


@contextmanager
def deleting_for_retention(cursor: Any) -> Iterator[None]:
    """Within the block, deletes of runs on `cursor`'s connection are retention."""
    if not enabled():
        yield
        return
    cursor.execute("SELECT set_config(%s, 'on', true)", [RETENTION_SETTING])
    try:
        yield
    finally:
        cursor.execute("SELECT set_config(%s, 'off', true)", [RETENTION_SETTING])


def enabled() -> bool:
    return connection.vendor == "postgresql"


@dataclass(frozen=True)
class DeltaTrigger:
    """Statement triggers on the run table that append the change of some grouped sums."""

    name: str
    table: str
    keys: tuple[str, ...]
    sums: dict[str, Expression]
    expressions: dict[str, Expression]
    required: tuple[str, ...] = ()
    blank: tuple[str, ...] = ()

    def grouped(self, rows: str, source: str | None = None) -> str:
        return grouped_sql(self.keys, self.sums, self.expressions, rows, source)

    def function_sql(self) -> str:
        keys = [f"coalesce({k}, '')" if k in self.blank else k for k in self.keys]
        sums = list(self.sums)
        columns = ", ".join([*self.keys, *sums])
        where = " AND ".join(f"{k} IS NOT NULL" for k in self.required) or "true"
        negated = ", ".join([*self.keys, *(f"-{s} AS {s}" for s in sums)])
        nonzero = " OR ".join(f"sum({s}) <> 0" for s in sums)
        summed = ", ".join([*keys, *(f"sum({s})" for s in sums)])
        group = ", ".join(keys)
        insert = f"INSERT INTO {self.table} ({columns})"

        def from_(select: str) -> str:
            return f"FROM ({select}) d WHERE {where} GROUP BY {group} HAVING {nonzero}"

        new, old = self.grouped("new_rows", "new_rows"), self.grouped("old_rows", "old_rows")
        # An INSERT's groups need no second grouping.
        plain = ", ".join([*keys, *sums])
        return f"""
CREATE OR REPLACE FUNCTION {self.name}() RETURNS trigger LANGUAGE plpgsql AS $body$
BEGIN
    IF TG_OP = 'INSERT' THEN
        {insert} SELECT {plain} FROM ({new}) d WHERE {where};
    ELSIF TG_OP = 'DELETE' THEN
        IF current_setting('{RETENTION_SETTING}', true) = 'on' THEN
            RETURN NULL;  -- retention: the runs go, what they counted stays
        END IF;
        {insert} SELECT {summed} {from_(f"SELECT {negated} FROM ({old}) o")};
    ELSE
        {insert} SELECT {summed}
        {from_(f"SELECT * FROM ({new}) n UNION ALL SELECT {negated} FROM ({old}) o")};
    END IF;
    RETURN NULL;
END
$body$"""

    def install_sql(self) -> list[str]:
        statements = [self.function_sql()]
        for suffix, event, referencing in (
            ("ins", "INSERT", "NEW TABLE AS new_rows"),
            ("upd", "UPDATE", "OLD TABLE AS old_rows NEW TABLE AS new_rows"),
            ("del", "DELETE", "OLD TABLE AS old_rows"),
        ):
            trigger = f"{self.name}_{suffix}"
            statements += [
                f"DROP TRIGGER IF EXISTS {trigger} ON {RUN_TABLE}",
                f"CREATE TRIGGER {trigger} AFTER {event} ON {RUN_TABLE} "
                f"REFERENCING {referencing} FOR EACH STATEMENT EXECUTE FUNCTION {self.name}()",
            ]
        return statements

    def drop_sql(self) -> list[str]:
        return [
            *(
                f"DROP TRIGGER IF EXISTS {self.name}_{s} ON {RUN_TABLE}"
                for s in ("ins", "upd", "del")
            ),
            f"DROP FUNCTION IF EXISTS {self.name}()",
        ]


def grouped_sql(
    keys: Iterable[str],
    sums: dict[str, Expression],
    expressions: dict[str, Expression],
    rows: str,
    source: str | None = None,
) -> str:
    """Compile `Run.objects.values(*keys).annotate(**sums)` to SQL reading `source AS rows`."""
    qs = Run.objects.annotate(**expressions).values(*keys).annotate(**sums).order_by()
    sql, params = qs.query.sql_with_params()
    text = connection.ops.compose_sql(sql, params)
    text = text.replace(f'FROM "{RUN_TABLE}"', f"FROM {source or RUN_TABLE} AS {rows}")
    return text.replace(f'"{RUN_TABLE}"', rows)


def execute(statements: Iterable[str]) -> None:
    with connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement)


def fold_lock(cursor, name: str) -> bool:
    cursor.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s))", [name])
    return bool(cursor.fetchone()[0])


WORKFLOW_TRIGGER = DeltaTrigger(
    name="orchestrator_workflow_counts",
    table=WorkflowRunDelta._meta.db_table,
    keys=("workflow_id",),
    sums={"runs": Count("id"), "failures": Count("id", filter=RunSets.FAILURES)},
    expressions={},
    required=("workflow_id",),
)


def install_workflow_counters() -> None:
    """Create the trigger and recount every workflow's runs, with writers held off."""
    if not enabled():
        return
    counter, delta = WorkflowCounter._meta.db_table, WorkflowRunDelta._meta.db_table
    counted = WORKFLOW_TRIGGER.grouped("r", RUN_TABLE)
    with transaction.atomic():
        execute(
            [
                f"LOCK TABLE {RUN_TABLE} IN SHARE MODE",
                *WORKFLOW_TRIGGER.install_sql(),
                f"TRUNCATE {counter}, {delta}",
                f"INSERT INTO {counter} (workflow_id, runs, failures) "
                f"SELECT workflow_id, runs, failures FROM ({counted})"
                " d WHERE workflow_id IS NOT NULL",
            ]
        )


def fold_workflow_counters() -> int:
    """Move the pending per-workflow deltas into the counters; return the delta rows folded."""
    if not enabled():
        return 0
    counter, delta = WorkflowCounter._meta.db_table, WorkflowRunDelta._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        if not fold_lock(cursor, counter):
            return 0
        cursor.execute(
            f"""
WITH moved AS (DELETE FROM {delta} RETURNING workflow_id, runs, failures),
folded AS (
    INSERT INTO {counter} AS c (workflow_id, runs, failures)
    SELECT m.workflow_id, sum(m.runs), sum(m.failures) FROM moved m
    WHERE EXISTS (SELECT 1 FROM orchestrator_workflow w WHERE w.id = m.workflow_id)
    GROUP BY m.workflow_id ORDER BY m.workflow_id
    ON CONFLICT (workflow_id) DO UPDATE
    SET runs = c.runs + EXCLUDED.runs, failures = c.failures + EXCLUDED.failures
)
SELECT count(*) FROM moved"""
        )
        return cursor.fetchone()[0]


def with_run_counts(workflows: QuerySet) -> QuerySet:
    """Annotate `run_count` and `failure_count`: counters plus pending deltas on PostgreSQL."""
    if not enabled():
        return workflows.annotate(
            run_count=Count("runs"), failure_count=Count("runs", filter=_runs(RunSets.FAILURES))
        )
    annotations = {}
    for column in ("runs", "failures"):
        folded = WorkflowCounter.objects.filter(workflow_id=OuterRef("pk")).values(column)[:1]
        pending = (
            WorkflowRunDelta.objects.filter(workflow_id=OuterRef("pk"))
            .values("workflow_id")
            .annotate(n=Sum(column))
            .values("n")
        )
        annotations[f"{'run' if column == 'runs' else 'failure'}_count"] = Coalesce(
            Subquery(folded, output_field=IntegerField()), 0
        ) + Coalesce(Subquery(pending, output_field=IntegerField()), 0)
    return workflows.annotate(**annotations)


def _runs(condition):
    children = []
    for child in condition.children:
        if isinstance(child, tuple):
            children.append((f"runs__{child[0]}", child[1]))
        else:
            children.append(_runs(child))
    q = condition.__class__()
    q.connector, q.negated, q.children = condition.connector, condition.negated, children
    return q
