"""The top bar's search: review items newest first in keyset pages, and on PostgreSQL trigram
indexes on the text it looks for in review items and workflows (the expressions Django's
icontains compares: upper(column::text)). SQLite searches by scanning."""

from django.db import migrations, models

TRIGRAM_INDEXES = {
    "reviewitem_reason_trgm": ("orchestrator_reviewitem", "reason"),
    "workflow_name_trgm": ("orchestrator_workflow", "name"),
    "workflow_goal_trgm": ("orchestrator_workflow", "goal"),
}


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for name, (table, column) in TRIGRAM_INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON {table} "
            f"USING gin (upper({column}::text) gin_trgm_ops)"
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in TRIGRAM_INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [("orchestrator", "0018_webhooks_for_every_event")]

    operations = [
        migrations.AddIndex(
            model_name="reviewitem",
            index=models.Index(fields=["created_at", "id"], name="review_created"),
        ),
        migrations.RunPython(create, drop),
    ]
