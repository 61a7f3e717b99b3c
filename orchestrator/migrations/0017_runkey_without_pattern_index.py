"""PostgreSQL: drop the pattern-operator index Django built beside the claims' primary key.

Django gives every indexed `varchar` column on PostgreSQL a second B-tree with
`varchar_pattern_ops`, for `LIKE 'prefix%'` outside the C locale. A claim (`RunKey.key`) is only
ever looked up by equality (`key = ANY(…)`, a join on the key), which the primary key serves, so
that index served nothing, while every run inserted wrote it once per claim (one to three a run,
through the claims trigger): about 2 µs a claim inserted (docs/run-indexes.md). SQLite has no
such index.
"""

from django.db import migrations

PATTERN_INDEXES = (
    "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
    " AND tablename = 'orchestrator_runkey' AND indexdef LIKE '%%varchar_pattern_ops%%'"
)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(PATTERN_INDEXES)
        for (name,) in cursor.fetchall():
            cursor.execute(f'DROP INDEX "{name}"')


def restore(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        "CREATE INDEX IF NOT EXISTS orchestrator_runkey_key_like"
        " ON orchestrator_runkey (key varchar_pattern_ops)"
    )


class Migration(migrations.Migration):
    dependencies = [("orchestrator", "0016_run_search_table")]

    operations = [migrations.RunPython(drop, restore)]
