"""Keep the failure type an agent sent when it was an alias, and the evidence that decided a
category (the envelope's `signal`), on every run."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0006_vocabulary_choices"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="reported_failure_type",
            field=models.CharField(blank=True, max_length=50, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="signal",
            field=models.CharField(blank=True, max_length=20),
        ),
    ]
