"""One delivery table for every outbound webhook: review resolutions and fired alerts. A delivery
carries its event, its payload and its target's sealed signing secret (copied when queued); the
deliveries written before get their token's secret, the pending ones the resolution they post,
and the outbox messages of the old task its new name."""

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Subquery

OLD_TASK = "orchestrator.tasks.deliver_resolution"
NEW_TASK = "orchestrator.tasks.deliver_webhook"


def fill(apps, schema_editor):
    Delivery = apps.get_model("orchestrator", "WebhookDelivery")
    ApiToken = apps.get_model("orchestrator", "ApiToken")
    secret = ApiToken.objects.filter(pk=OuterRef("token_id")).values("sealed_signing_secret")
    Delivery.objects.filter(token__isnull=False).update(sealed_secret=Subquery(secret[:1]))
    pending = list(Delivery.objects.filter(state="pending").values_list("pk", "item_id"))
    if pending:
        # The resolution as an agent reads it, by the code that posted it when these were queued.
        from orchestrator.coordination.delivery import resolution_payload
        from orchestrator.models import ReviewItem

        for pk, item_id in pending:
            item = ReviewItem.objects.get(pk=item_id)
            Delivery.objects.filter(pk=pk).update(payload=resolution_payload(item))
    rename_task(apps, OLD_TASK, NEW_TASK)


def rename_task(apps, old, new):
    apps.get_model("orchestrator", "OutboxMessage").objects.filter(task=old).update(task=new)


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0017_runkey_without_pattern_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhookdelivery",
            name="event",
            field=models.CharField(
                choices=[("review.resolved", "Review Resolved"), ("alert.fired", "Alert Fired")],
                default="review.resolved",
                max_length=30,
            ),
        ),
        migrations.AddField(
            model_name="webhookdelivery",
            name="payload",
            field=models.JSONField(default=dict),
        ),
        migrations.AddField(
            model_name="webhookdelivery",
            name="sealed_secret",
            field=models.TextField(blank=True, editable=False),
        ),
        migrations.AlterField(
            model_name="webhookattempt",
            name="acked",
            field=models.BooleanField(
                default=False, help_text="Answered with a 2xx: the receiver has it"
            ),
        ),
        migrations.AlterField(
            model_name="webhookdelivery",
            name="item",
            field=models.OneToOneField(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="webhook",
                to="orchestrator.reviewitem",
            ),
        ),
        migrations.AlterField(
            model_name="webhookdelivery",
            name="token",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="deliveries",
                to="orchestrator.apitoken",
            ),
        ),
        migrations.RunPython(fill, lambda apps, _: rename_task(apps, NEW_TASK, OLD_TASK)),
    ]
