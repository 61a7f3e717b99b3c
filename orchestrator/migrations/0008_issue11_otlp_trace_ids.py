"""Keep the OpenTelemetry trace and span ids on runs (spans received on /otlp/v1/traces, or runs
reported with them), with the index that serves the runs of one trace."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0007_issue12_reported_failure_type_and_signal"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="span_id",
            field=models.CharField(blank=True, max_length=16),
        ),
        migrations.AddField(
            model_name="run",
            name="trace_id",
            field=models.CharField(blank=True, max_length=32),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("trace_id", ""), _negated=True),
                fields=["trace_id", "created_at"],
                name="run_trace_created",
            ),
        ),
    ]
