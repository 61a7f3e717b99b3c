"""The rollups, failure groups and alert rules move to `insights` with their tables: removed
from this app's state only. Their content types follow them (permissions and admin history stay
attached), and messages waiting in the outbox name the tasks by their new module."""

from django.db import migrations

MODELS = [
    "alertdelivery",
    "alertrule",
    "failuregroup",
    "failuregrouphour",
    "minuterollup",
    "rollupversion",
    "rundelta",
    "runrollup",
    "runtotal",
    "sixhourrollup",
    "sixhourwastedretries",
]


def relabel(old: str, new: str):
    def forwards(apps, schema_editor):
        ContentType = apps.get_model("contenttypes", "ContentType")
        taken = set(
            ContentType.objects.filter(app_label=new, model__in=MODELS).values_list(
                "model", flat=True
            )
        )
        ContentType.objects.filter(app_label=old, model__in=set(MODELS) - taken).update(
            app_label=new
        )
        OutboxMessage = apps.get_model("orchestrator", "OutboxMessage")
        for message in OutboxMessage.objects.filter(task__startswith=f"{old}.tasks."):
            message.task = f"{new}.tasks." + message.task.removeprefix(f"{old}.tasks.")
            message.save(update_fields=["task"])

    return forwards


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0010_insert_deltas_grouped_once"),
        ("insights", "0001_initial"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name="alertdelivery",
                    name="rule",
                ),
                migrations.RemoveField(
                    model_name="failuregroup",
                    name="example_run",
                ),
                migrations.RemoveField(
                    model_name="failuregroup",
                    name="state_changed_by",
                ),
                migrations.RemoveField(
                    model_name="failuregrouphour",
                    name="group",
                ),
                migrations.DeleteModel(
                    name="MinuteRollup",
                ),
                migrations.DeleteModel(
                    name="RollupVersion",
                ),
                migrations.DeleteModel(
                    name="RunDelta",
                ),
                migrations.DeleteModel(
                    name="RunRollup",
                ),
                migrations.DeleteModel(
                    name="RunTotal",
                ),
                migrations.DeleteModel(
                    name="SixHourRollup",
                ),
                migrations.DeleteModel(
                    name="SixHourWastedRetries",
                ),
                migrations.DeleteModel(
                    name="AlertDelivery",
                ),
                migrations.DeleteModel(
                    name="AlertRule",
                ),
                migrations.DeleteModel(
                    name="FailureGroup",
                ),
                migrations.DeleteModel(
                    name="FailureGroupHour",
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(relabel("dashboard", "insights"), relabel("insights", "dashboard")),
    ]
