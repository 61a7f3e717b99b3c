"""Failed OTLP spans kept for joining the parts of a trace exported in different batches."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0020_deadlines_for_agents"),
    ]

    operations = [
        migrations.CreateModel(
            name="TraceSpan",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("token_id", models.BigIntegerField()),
                ("trace_id", models.CharField(max_length=32)),
                ("span_id", models.CharField(max_length=16)),
                ("parent_id", models.CharField(blank=True, max_length=16)),
                ("span", models.BinaryField()),
                ("resource", models.BinaryField()),
                ("digest", models.CharField(max_length=64)),
                ("awaits", models.CharField(blank=True, max_length=16)),
                ("due_at", models.DateTimeField(blank=True, null=True)),
                ("run_id", models.BigIntegerField(blank=True, null=True)),
                ("own_run", models.BooleanField(default=False)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                "indexes": [
                    models.Index(
                        condition=models.Q(("awaits", ""), _negated=True),
                        fields=["token_id", "trace_id", "awaits"],
                        name="tracespan_awaits",
                    ),
                    models.Index(
                        condition=models.Q(("run_id__isnull", True)),
                        fields=["due_at"],
                        name="tracespan_due",
                    ),
                    models.Index(fields=["created_at"], name="tracespan_created"),
                ],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("token_id", "trace_id", "span_id"), name="tracespan_token_span"
                    )
                ],
            },
        ),
    ]
