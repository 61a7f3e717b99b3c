"""/metrics' histograms and event counters, folded per hour of the event (`insights.observations`)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("insights", "0004_failure_group_search"),
    ]

    operations = [
        migrations.CreateModel(
            name="ObservationFold",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("through", models.DateTimeField()),
            ],
        ),
        migrations.CreateModel(
            name="ObservationHour",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "hour",
                    models.DateTimeField(
                        blank=True,
                        help_text="Start of the hour (UTC) the events happened in",
                        null=True,
                    ),
                ),
                ("family", models.CharField(max_length=60)),
                ("agent", models.CharField(blank=True, max_length=100)),
                ("source", models.CharField(blank=True, max_length=100)),
                ("failure_type", models.CharField(blank=True, max_length=20)),
                ("action", models.CharField(blank=True, max_length=20)),
                ("event", models.CharField(blank=True, max_length=30)),
                (
                    "bucket",
                    models.PositiveSmallIntegerField(
                        default=0,
                        help_text="Index of the family's first bound the values are at most",
                    ),
                ),
                ("count", models.BigIntegerField(default=0)),
                ("total", models.FloatField(default=0.0, help_text="Sum of the observed values")),
            ],
            options={
                "indexes": [models.Index(fields=["hour"], name="observation_hour")],
            },
        ),
    ]
