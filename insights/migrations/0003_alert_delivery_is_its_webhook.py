"""A firing's own record of its webhook goes: its state, attempts and payload are its
`orchestrator.WebhookDelivery`'s (a separate migration from the copy: PostgreSQL alters no table
with rows just written in the same transaction)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("insights", "0002_alerts_post_signed_webhooks"),
    ]

    operations = [
        migrations.RemoveField(model_name="alertdelivery", name="attempts"),
        migrations.RemoveField(model_name="alertdelivery", name="error"),
        migrations.RemoveField(model_name="alertdelivery", name="payload"),
        migrations.RemoveField(model_name="alertdelivery", name="response_code"),
        migrations.RemoveField(model_name="alertdelivery", name="sent_at"),
        migrations.RemoveField(model_name="alertdelivery", name="status"),
        migrations.AlterField(
            model_name="alertdelivery",
            name="webhook",
            field=models.OneToOneField(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="alert",
                to="orchestrator.webhookdelivery",
            ),
        ),
    ]
