"""Per-workflow run counters kept by triggers, and trigram indexes for the runs search."""

from django.db import migrations, models

# The runs page's search (`detail` and the attempted call, case-insensitive substring): trigram
# GIN indexes on exactly the expressions Django's icontains compiles to, UPPER(column::text).
TRIGRAM_INDEXES = {
    "run_detail_trgm": "upper(detail::text)",
    "run_attempted_trgm": "upper(attempted::text)",
}


def counters_and_search(apps, schema_editor):
    """PostgreSQL only: the per-workflow counters' triggers (counted once from the runs), and
    pg_trgm with the search indexes. SQLite counts and searches live."""
    if schema_editor.connection.vendor != "postgresql":
        return
    from orchestrator import counters

    counters.install_workflow_counters()
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    for name, expression in TRIGRAM_INDEXES.items():
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON orchestrator_run "
            f"USING gin ({expression} gin_trgm_ops)"
        )


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    from orchestrator import counters

    for statement in counters.WORKFLOW_TRIGGER.drop_sql():
        schema_editor.execute(statement)
    for name in TRIGRAM_INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0012_issue14_partitions_store"),
    ]

    operations = [
        migrations.CreateModel(
            name="WorkflowCounter",
            fields=[
                ("workflow_id", models.BigIntegerField(primary_key=True, serialize=False)),
                ("runs", models.BigIntegerField(default=0)),
                ("failures", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name="WorkflowRunDelta",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("workflow_id", models.BigIntegerField()),
                ("runs", models.BigIntegerField(default=0)),
                ("failures", models.BigIntegerField(default=0)),
            ],
            options={
                "indexes": [models.Index(fields=["workflow_id"], name="workflowrundelta_workflow")],
            },
        ),
        migrations.AddIndex(
            model_name="workflow",
            index=models.Index(fields=["created_at", "id"], name="wf_created_id"),
        ),
        migrations.RunPython(counters_and_search, drop),
    ]
