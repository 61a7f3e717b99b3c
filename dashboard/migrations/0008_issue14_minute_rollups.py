"""Minute rollups, running totals and their deltas kept by the run table's triggers; the
rollup version that keys the cached tiles."""

from django.db import migrations, models


def install(apps, schema_editor):
    """The version row everywhere; on PostgreSQL the triggers, and the totals and recent minutes
    counted once from the runs (SQLite counts live)."""
    apps.get_model("dashboard", "RollupVersion").objects.get_or_create(pk=1)
    if schema_editor.connection.vendor == "postgresql":
        from insights import minutes

        minutes.install()


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        from insights import minutes

        minutes.uninstall()


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0007_issue16_analytics"),
        ("orchestrator", "0013_issue14_counters"),
    ]

    operations = [
        migrations.CreateModel(
            name="RollupVersion",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("version", models.BigIntegerField(default=0)),
            ],
        ),
        migrations.CreateModel(
            name="MinuteRollup",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("status", models.CharField(max_length=12)),
                (
                    "failure_type",
                    models.CharField(blank=True, help_text="Blank: no failure", max_length=20),
                ),
                ("count", models.BigIntegerField(default=0)),
                ("partial_runs", models.BigIntegerField(default=0)),
                ("partial_items", models.BigIntegerField(default=0)),
                ("empty_runs", models.BigIntegerField(default=0)),
                ("retries", models.BigIntegerField(default=0)),
                ("early_retries", models.BigIntegerField(default=0)),
                ("switched", models.BigIntegerField(default=0)),
                ("avoided_retries", models.BigIntegerField(default=0)),
                ("futile_retries", models.BigIntegerField(default=0)),
                (
                    "minute",
                    models.DateTimeField(
                        help_text="Start of the minute (UTC) the runs were created in"
                    ),
                ),
                ("source", models.CharField(max_length=100)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("minute", "status", "failure_type", "source"),
                        name="minute_rollup_key",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="RunDelta",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("status", models.CharField(max_length=12)),
                (
                    "failure_type",
                    models.CharField(blank=True, help_text="Blank: no failure", max_length=20),
                ),
                ("count", models.BigIntegerField(default=0)),
                ("partial_runs", models.BigIntegerField(default=0)),
                ("partial_items", models.BigIntegerField(default=0)),
                ("empty_runs", models.BigIntegerField(default=0)),
                ("retries", models.BigIntegerField(default=0)),
                ("early_retries", models.BigIntegerField(default=0)),
                ("switched", models.BigIntegerField(default=0)),
                ("avoided_retries", models.BigIntegerField(default=0)),
                ("futile_retries", models.BigIntegerField(default=0)),
                (
                    "minute",
                    models.DateTimeField(
                        help_text="Start of the minute (UTC) the runs were created in"
                    ),
                ),
                ("source", models.CharField(max_length=100)),
            ],
            options={
                "indexes": [models.Index(fields=["minute"], name="rundelta_minute")],
            },
        ),
        migrations.CreateModel(
            name="RunTotal",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("status", models.CharField(max_length=12)),
                (
                    "failure_type",
                    models.CharField(blank=True, help_text="Blank: no failure", max_length=20),
                ),
                ("count", models.BigIntegerField(default=0)),
                ("partial_runs", models.BigIntegerField(default=0)),
                ("partial_items", models.BigIntegerField(default=0)),
                ("empty_runs", models.BigIntegerField(default=0)),
                ("retries", models.BigIntegerField(default=0)),
                ("early_retries", models.BigIntegerField(default=0)),
                ("switched", models.BigIntegerField(default=0)),
                ("avoided_retries", models.BigIntegerField(default=0)),
                ("futile_retries", models.BigIntegerField(default=0)),
                ("source", models.CharField(max_length=100)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("status", "failure_type", "source"), name="run_total_key"
                    )
                ],
            },
        ),
        migrations.RunPython(install, uninstall),
    ]
