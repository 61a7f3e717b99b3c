"""/metrics' folded observations carry the project of the runs and review items they count; the
hours folded before projects are the default project's (every run then was)."""

from django.db import migrations, models

WEBHOOK_FAMILIES = (
    "failsight_webhook_delivery_seconds",
    "failsight_webhook_delivery_attempts",
    "failsight_webhook_failures",
)


def default_project(apps, schema_editor):
    ObservationHour = apps.get_model("insights", "ObservationHour")
    ObservationHour.objects.exclude(family__in=WEBHOOK_FAMILIES).update(project="default")


class Migration(migrations.Migration):
    dependencies = [
        ("insights", "0007_spend_budget_alerts"),
    ]

    operations = [
        migrations.AddField(
            model_name="observationhour",
            name="project",
            field=models.CharField(blank=True, max_length=50),
        ),
        migrations.RunPython(default_project, migrations.RunPython.noop),
    ]
