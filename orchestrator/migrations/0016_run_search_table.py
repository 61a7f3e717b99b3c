"""PostgreSQL: the runs search's trigram indexes move from the run table to a table of their own.

The two trigram GIN indexes on the run table (its attempted call and its detail, migration 0013)
were 9.6 of the 23.4 µs each inserted run cost (docs/run-indexes.md). `orchestrator.search`
keeps the same text in `orchestrator_runsearch`, filled by beat a few seconds behind the writes;
this migration creates it, fills it from the runs there are and builds its indexes, then drops
the run table's. SQLite searches by scanning, as before.
"""

from django.db import migrations

# As in 0013_issue14_counters: a migration keeps its own copy.
RUN_TRIGRAM_INDEXES = {
    "run_detail_trgm": "upper(detail::text)",
    "run_attempted_trgm": "upper(attempted::text)",
}


def move(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    from orchestrator import partitions, search

    search.install(partitions.ranges())
    for name in RUN_TRIGRAM_INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


def move_back(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    from orchestrator import search

    for name, expression in RUN_TRIGRAM_INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON orchestrator_run "
            f"USING gin ({expression} gin_trgm_ops)"
        )
    search.uninstall()


class Migration(migrations.Migration):
    dependencies = [("orchestrator", "0015_claims_follow_updates")]

    operations = [migrations.RunPython(move, move_back)]
