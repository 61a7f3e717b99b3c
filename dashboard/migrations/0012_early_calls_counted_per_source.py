"""The minute counters' trigger function is compiled again from `RunSets`: the early set now
counts an agent's call started inside its source's Retry-After hold (whatever its query) beside a
retry started before its due time. Only the function changes."""

from django.db import migrations


def compile_counters(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        from insights import minutes
        from orchestrator import counters

        counters.execute([minutes.trigger().function_sql()])


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0011_models_move_to_insights"),
        ("insights", "0003_alert_delivery_is_its_webhook"),
    ]

    operations = [migrations.RunPython(compile_counters, migrations.RunPython.noop)]
