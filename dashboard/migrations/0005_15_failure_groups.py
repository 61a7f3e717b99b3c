"""Failure groups (a row per signature) and their hourly rows, folded by a periodic task."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0004_issue12_futile_retries"),
        ("orchestrator", "0009_15_signatures_review_facets"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="FailureGroup",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("count", models.PositiveIntegerField(default=0)),
                ("wasted", models.PositiveIntegerField(default=0)),
                ("partial", models.PositiveIntegerField(default=0)),
                ("futile", models.PositiveIntegerField(default=0)),
                ("decided_retry", models.PositiveIntegerField(default=0)),
                ("decided_switch", models.PositiveIntegerField(default=0)),
                ("decided_partial", models.PositiveIntegerField(default=0)),
                ("decided_escalate", models.PositiveIntegerField(default=0)),
                ("decided_abort", models.PositiveIntegerField(default=0)),
                ("recovered_retry", models.PositiveIntegerField(default=0)),
                ("recovered_switch", models.PositiveIntegerField(default=0)),
                ("ended_escalated", models.PositiveIntegerField(default=0)),
                ("ended_lost", models.PositiveIntegerField(default=0)),
                ("ended_open", models.PositiveIntegerField(default=0)),
                ("signature", models.CharField(max_length=64, unique=True)),
                ("source", models.CharField(max_length=100)),
                (
                    "failure_type",
                    models.CharField(
                        choices=[
                            ("transient", "transient"),
                            ("rate_limited", "rate limited"),
                            ("auth_failure", "auth failure"),
                            ("resource_missing", "resource missing"),
                            ("invalid_input", "invalid input"),
                            ("timeout", "timeout"),
                            ("server_fault", "server fault"),
                            ("unclassified", "unclassified"),
                        ],
                        max_length=20,
                    ),
                ),
                (
                    "pattern",
                    models.CharField(blank=True, help_text="The normalised detail", max_length=500),
                ),
                (
                    "example",
                    models.TextField(blank=True, help_text="The detail of the first failure seen"),
                ),
                ("first_seen", models.DateTimeField()),
                ("last_seen", models.DateTimeField()),
                ("agents", models.JSONField(blank=True, default=list)),
                ("agents_capped", models.BooleanField(default=False)),
                ("workflows", models.JSONField(blank=True, default=list)),
                ("workflows_capped", models.BooleanField(default=False)),
                (
                    "state",
                    models.CharField(
                        choices=[("open", "open"), ("muted", "muted"), ("resolved", "resolved")],
                        default="open",
                        max_length=10,
                    ),
                ),
                ("state_changed_at", models.DateTimeField(blank=True, null=True)),
                ("resolved_at", models.DateTimeField(blank=True, null=True)),
                (
                    "regressed_at",
                    models.DateTimeField(
                        blank=True, help_text="When it came back after being resolved", null=True
                    ),
                ),
                (
                    "example_run",
                    models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="orchestrator.run",
                    ),
                ),
                (
                    "state_changed_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-last_seen", "-id"],
            },
        ),
        migrations.CreateModel(
            name="FailureGroupHour",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("count", models.PositiveIntegerField(default=0)),
                ("wasted", models.PositiveIntegerField(default=0)),
                ("partial", models.PositiveIntegerField(default=0)),
                ("futile", models.PositiveIntegerField(default=0)),
                ("decided_retry", models.PositiveIntegerField(default=0)),
                ("decided_switch", models.PositiveIntegerField(default=0)),
                ("decided_partial", models.PositiveIntegerField(default=0)),
                ("decided_escalate", models.PositiveIntegerField(default=0)),
                ("decided_abort", models.PositiveIntegerField(default=0)),
                ("recovered_retry", models.PositiveIntegerField(default=0)),
                ("recovered_switch", models.PositiveIntegerField(default=0)),
                ("ended_escalated", models.PositiveIntegerField(default=0)),
                ("ended_lost", models.PositiveIntegerField(default=0)),
                ("ended_open", models.PositiveIntegerField(default=0)),
                (
                    "hour",
                    models.DateTimeField(
                        help_text="Start of the hour (UTC) the failures were created in"
                    ),
                ),
                ("first_at", models.DateTimeField()),
                ("last_at", models.DateTimeField()),
                (
                    "group",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="hours",
                        to="dashboard.failuregroup",
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="failuregroup",
            index=models.Index(fields=["last_seen", "id"], name="failuregroup_last_seen"),
        ),
        migrations.AddIndex(
            model_name="failuregrouphour",
            index=models.Index(fields=["hour"], name="failuregrouphour_hour"),
        ),
        migrations.AddConstraint(
            model_name="failuregrouphour",
            constraint=models.UniqueConstraint(
                fields=("group", "hour"), name="failuregrouphour_key"
            ),
        ),
    ]
