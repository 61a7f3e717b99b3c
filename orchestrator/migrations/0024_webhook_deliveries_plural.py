from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0023_run_classified_policy_version"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="webhookdelivery",
            options={
                "ordering": ["-created_at", "-id"],
                "verbose_name_plural": "webhook deliveries",
            },
        ),
    ]
