"""Alerts are posted by the one webhook deliverer, signed with a secret of their rule: a firing
links its `orchestrator.WebhookDelivery` (state, attempts), and the firings recorded before become
deliveries of their own, with what was known of them (state, attempts, last error)."""

import django.db.models.deletion
from django.db import migrations, models

OLD_TASK = "insights.tasks.deliver_alert"
NEW_TASK = "orchestrator.tasks.deliver_webhook"
STATES = {"pending": "pending", "sent": "delivered", "failed": "failed"}


def to_webhooks(apps, schema_editor):
    AlertDelivery = apps.get_model("insights", "AlertDelivery")
    Webhook = apps.get_model("orchestrator", "WebhookDelivery")
    Outbox = apps.get_model("orchestrator", "OutboxMessage")
    waiting = {m.args[0]: m for m in Outbox.objects.filter(task=OLD_TASK) if m.args}
    for alert in AlertDelivery.objects.select_related("rule"):
        message = waiting.get(alert.pk)
        hook = Webhook.objects.create(
            event="alert.fired",
            url=alert.rule.url,
            payload=alert.payload,
            # a firing whose next try waits in the outbox is still on its way
            state="pending" if message else STATES.get(alert.status, "failed"),
            attempts=min(alert.attempts, 32767),
            created_at=alert.created_at,
            delivered_at=alert.sent_at,
            last_error=alert.error[:500],
        )
        alert.webhook = hook
        alert.save(update_fields=["webhook"])
        if message:
            message.task, message.args = NEW_TASK, [hook.pk]
            message.save(update_fields=["task", "args"])


class Migration(migrations.Migration):
    dependencies = [
        ("insights", "0001_initial"),
        ("orchestrator", "0018_webhooks_for_every_event"),
    ]

    operations = [
        migrations.AddField(
            model_name="alertrule",
            name="sealed_signing_secret",
            field=models.TextField(blank=True, editable=False),
        ),
        migrations.AddField(
            model_name="alertdelivery",
            name="webhook",
            field=models.OneToOneField(
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="alert",
                to="orchestrator.webhookdelivery",
            ),
        ),
        migrations.RunPython(to_webhooks, migrations.RunPython.noop),
    ]
