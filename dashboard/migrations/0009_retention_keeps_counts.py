"""The counters' trigger functions leave the counts alone when runs are deleted for retention
(`orchestrator.counters.RETENTION_SETTING`): /metrics' running totals and the workflows' counts
no longer go down as old runs are pruned row by row. Only the functions change."""

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
        ("dashboard", "0008_issue14_minute_rollups"),
        ("orchestrator", "0014_issue16_analytics"),
    ]

    operations = [migrations.RunPython(install, migrations.RunPython.noop)]
