"""PostgreSQL: the top bar's trigram indexes on review items, workflows and failure groups write
each entry into the index at once (fastupdate off) instead of through a pending list. A pending
list holds up to gin_pending_list_limit (4 MB) of entries until a vacuum or an insert past the
limit flushes it, and every search reads all of it: at the dashboard benchmark's data (6,000 review
items, 20,000 workflows, their pending lists never flushed) a review item's reason searched in
20 ms and a workflow's name in 42 ms, by sequential scan, and in 0.2 and 0.1 ms through the
flushed indexes. These tables take a few rows a second at most, so an entry written at once costs
little; the runs search's own table, filled in bulk by beat, keeps its pending lists. SQLite
searches by scanning."""

from django.db import migrations

INDEXES = (
    "reviewitem_reason_trgm",
    "workflow_name_trgm",
    "workflow_goal_trgm",
    "failuregroup_pattern_trgm",
    "failuregroup_example_trgm",
)


def entries_at_once(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f"ALTER INDEX IF EXISTS {name} SET (fastupdate = off)")
        # What the pending list holds already: into the index now.
        schema_editor.execute(
            f"SELECT gin_clean_pending_list(to_regclass('{name}')) "
            f"WHERE to_regclass('{name}') IS NOT NULL"
        )


def through_pending_lists(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f"ALTER INDEX IF EXISTS {name} RESET (fastupdate)")


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0012_early_calls_counted_per_source"),
        ("insights", "0004_failure_group_search"),
        ("orchestrator", "0019_search_indexes"),
    ]

    operations = [migrations.RunPython(entries_at_once, through_pending_lists)]
