"""WebhookDelivery by creation time: /metrics' fold of the last hours' deliveries, the admin's list."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0024_webhook_deliveries_plural"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="webhookdelivery",
            index=models.Index(fields=["created_at", "id"], name="webhook_created"),
        ),
    ]
