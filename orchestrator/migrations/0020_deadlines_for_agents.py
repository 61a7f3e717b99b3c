"""Deadlines for what only an agent finishes: a token's own running timeout, and the index of
resolutions no agent picked up (the overview's tile and its list)."""

import datetime

import django.core.validators
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0019_search_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="running_timeout",
            field=models.DurationField(
                blank=True,
                help_text="How long a run this token reports as running may stay unfinished before the sweeper finishes it as a timeout (seconds, or HH:MM:SS); blank: RUN_RUNNING_TIMEOUT",
                null=True,
                validators=[
                    django.core.validators.MinValueValidator(datetime.timedelta(seconds=1))
                ],
            ),
        ),
        migrations.AddIndex(
            model_name="reviewitem",
            index=models.Index(
                condition=models.Q(
                    ("delivered_at__isnull", True), ("origin", "agent"), ("state", "resolved")
                ),
                fields=["resolved_at", "id"],
                name="review_agent_unpicked",
            ),
        ),
    ]
