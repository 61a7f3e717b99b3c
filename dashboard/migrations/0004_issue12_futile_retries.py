"""Count futile retries in the rollups (failures retried although they said a retry cannot help),
and fill the new column for the hours already folded, with the condition of
`orchestrator.models.RunSets.FUTILE_RETRIES` as it reads at this migration."""

from datetime import UTC, timedelta

from django.db import migrations, models
from django.db.models import Count, F
from django.db.models.functions import Trunc

HOUR = timedelta(hours=1)
FAILURE_STATUSES = ("failed", "escalated")


def fill_futile_retries(apps, schema_editor):
    Run = apps.get_model("orchestrator", "Run")
    RunRollup = apps.get_model("dashboard", "RunRollup")
    SixHourRollup = apps.get_model("dashboard", "SixHourRollup")
    futile = (
        Run.objects.filter(status__in=FAILURE_STATUSES, retryable=False, decision="retry")
        .exclude(failure_type="auth_failure")
        .annotate(hour=Trunc("created_at", "hour", tzinfo=UTC))
        .values_list("hour", "status", "failure_type", "source")
        .annotate(n=Count("id"))
        .order_by()
    )
    for hour, status, ftype, source, n in futile:
        key = dict(status=status, failure_type=ftype or "")
        RunRollup.objects.filter(hour=hour, source=source, **key).update(futile_retries=n)
        # Each six-hour block sums the hours from its start: the six blocks holding this hour.
        starts = [hour - offset * HOUR for offset in range(6)]
        SixHourRollup.objects.filter(start__in=starts, **key).update(
            futile_retries=F("futile_retries") + n
        )


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0003_six_hour_rollups"),
        ("orchestrator", "0007_issue12_reported_failure_type_and_signal"),
    ]

    operations = [
        migrations.AddField(
            model_name="runrollup",
            name="futile_retries",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="sixhourrollup",
            name="futile_retries",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.RunPython(fill_futile_retries, migrations.RunPython.noop),
    ]
