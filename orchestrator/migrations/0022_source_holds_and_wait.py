"""A source's Retry-After hold keeps when it began (`hold_from`), so that a call started inside it
counts as early whatever its query, and `wait` joins the decisions."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0021_otlp_trace_spans"),
    ]

    operations = [
        migrations.AddField(
            model_name="sourcehealth",
            name="hold_from",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name="run",
            name="decision",
            field=models.CharField(
                blank=True,
                choices=[
                    ("retry", "retry"),
                    ("wait", "wait"),
                    ("switch_source", "switch source"),
                    ("accept_partial", "accept partial"),
                    ("escalate", "escalate"),
                    ("abort", "abort"),
                ],
                max_length=20,
            ),
        ),
    ]
