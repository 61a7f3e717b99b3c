"""PostgreSQL: trigram indexes on what the top bar's search looks for in failure groups (their
pattern and example detail, as Django's icontains compares them). SQLite searches by scanning."""

from django.db import migrations

TRIGRAM_INDEXES = {
    "failuregroup_pattern_trgm": "pattern",
    "failuregroup_example_trgm": "example",
}


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for name, column in TRIGRAM_INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON dashboard_failuregroup "
            f"USING gin (upper({column}::text) gin_trgm_ops)"
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in TRIGRAM_INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("insights", "0003_alert_delivery_is_its_webhook")]

    operations = [migrations.RunPython(create, drop)]
