"""The counters' trigger functions write an INSERT's deltas grouped once: an insert's groups are
already one row per key with positive counts, so the second grouping (and its HAVING), which a
DELETE or UPDATE needs to net old against new, is left out. It was most of the trigger's time
on a single report's one-row statement. Only the functions change."""

from django.db import migrations


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        from insights import minutes
        from orchestrator import counters

        counters.execute(
            [counters.WORKFLOW_TRIGGER.function_sql(), minutes.trigger().function_sql()]
        )


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0009_retention_keeps_counts"),
        ("orchestrator", "0015_claims_follow_updates"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
