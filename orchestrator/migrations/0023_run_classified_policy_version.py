from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0022_source_holds_and_wait"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="classified_policy_version",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
    ]
