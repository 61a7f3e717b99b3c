"""Leases on runs, the outbox, idempotent workflow starts, and readable run times.

Before the check constraints, run times stored earlier outside years 1-9999 in UTC (which no page
or list could read back) are cleared: the rest of each such run is kept.
"""

import datetime

import django.utils.timezone
from django.db import migrations, models


def clear_unreadable_times(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return  # SQLite stores what Python wrote, which is always readable
    with schema_editor.connection.cursor() as cursor:
        for column in ("started_at", "finished_at"):
            cursor.execute(
                f"UPDATE orchestrator_run SET {column} = NULL WHERE {column} < %s OR {column} > %s",
                [
                    datetime.datetime.min.replace(tzinfo=datetime.UTC),
                    datetime.datetime.max.replace(tzinfo=datetime.UTC),
                ],
            )


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0009_15_signatures_review_facets"),
    ]

    operations = [
        migrations.CreateModel(
            name="OutboxMessage",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("task", models.CharField(max_length=200)),
                ("args", models.JSONField(default=list)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                ("available_at", models.DateTimeField()),
                (
                    "attempts",
                    models.PositiveIntegerField(default=0, help_text="Sends tried by the sweeper"),
                ),
                ("last_error", models.CharField(blank=True, max_length=500)),
            ],
            options={
                "ordering": ["available_at", "id"],
            },
        ),
        migrations.RemoveIndex(
            model_name="run",
            name="run_dispatched_unstarted",
        ),
        migrations.AddField(
            model_name="run",
            name="lease_owner",
            field=models.CharField(
                blank=True,
                help_text="host:pid of the worker process holding the lease",
                max_length=200,
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="lease_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="workflow",
            name="idempotency_key",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.AddField(
            model_name="workflow",
            name="request_hash",
            field=models.CharField(
                blank=True,
                help_text="Hash of the request body, to refuse a reused key",
                max_length=64,
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("lease_until__isnull", True), ("status", "running")),
                fields=["dispatched_at"],
                name="run_dispatched_unleased",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("status", "running")),
                fields=["lease_until"],
                name="run_lease_running",
            ),
        ),
        migrations.AddIndex(
            model_name="workflow",
            index=models.Index(
                condition=models.Q(("status__in", ["running", "awaiting_review"])),
                fields=["updated_at"],
                name="wf_unfinished_updated",
            ),
        ),
        migrations.RunPython(clear_unreadable_times, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("started_at__isnull", True),
                    models.Q(
                        ("started_at__gte", datetime.datetime(1, 1, 1, 0, 0, tzinfo=datetime.UTC)),
                        (
                            "started_at__lte",
                            datetime.datetime(
                                9999, 12, 31, 23, 59, 59, 999999, tzinfo=datetime.UTC
                            ),
                        ),
                    ),
                    _connector="OR",
                ),
                name="run_started_at_readable",
            ),
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("finished_at__isnull", True),
                    models.Q(
                        ("finished_at__gte", datetime.datetime(1, 1, 1, 0, 0, tzinfo=datetime.UTC)),
                        (
                            "finished_at__lte",
                            datetime.datetime(
                                9999, 12, 31, 23, 59, 59, 999999, tzinfo=datetime.UTC
                            ),
                        ),
                    ),
                    _connector="OR",
                ),
                name="run_finished_at_readable",
            ),
        ),
        migrations.AddConstraint(
            model_name="workflow",
            constraint=models.UniqueConstraint(
                condition=models.Q(("idempotency_key", ""), _negated=True),
                fields=("token", "idempotency_key"),
                name="workflow_idempotency_key_per_token",
            ),
        ),
        migrations.AddIndex(
            model_name="outboxmessage",
            index=models.Index(fields=["available_at"], name="outbox_available"),
        ),
    ]
