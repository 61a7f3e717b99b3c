"""Failure signatures on runs (failure groups), the review queue's facets on its items,
lowercase resolution labels, and the indexes the queue's pages and the groups' fold read.

Existing review items get their facets from their runs and workflows, and their signature cut to
the 32 hex digits runs now carry, so an item and its failure group share one key. Runs stored
before this migration keep a blank signature: the groups' fold signs the failures of the hours it
recomputes, and older failures are not grouped (a full rewrite of the run table is not worth it).
"""

from django.conf import settings
from django.db import migrations, models


def copy_facets(apps, schema_editor):
    ReviewItem = apps.get_model("orchestrator", "ReviewItem")
    items = ReviewItem.objects.select_related("run", "workflow")
    for item in items.iterator(chunk_size=500):
        item.source = item.run.source
        item.agent = item.run.agent
        # The rule of Workflow.is_built_in, as of this migration.
        item.origin = "built_in" if item.workflow_id and item.workflow.capability else "agent"
        item.signature = item.signature[:32]
        item.save(update_fields=["source", "agent", "origin", "signature"])


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0008_issue11_otlp_trace_ids"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="reviewitem",
            name="review_pending_created",
        ),
        migrations.AddField(
            model_name="reviewitem",
            name="agent",
            field=models.CharField(blank=True, max_length=100),
        ),
        migrations.AddField(
            model_name="reviewitem",
            name="origin",
            field=models.CharField(
                choices=[("built_in", "built-in"), ("agent", "agent-reported")],
                default="agent",
                max_length=10,
            ),
        ),
        migrations.AddField(
            model_name="reviewitem",
            name="outcome",
            field=models.CharField(
                blank=True,
                help_text="What applying the resolution did (the timeline's)",
                max_length=300,
            ),
        ),
        migrations.AddField(
            model_name="reviewitem",
            name="source",
            field=models.CharField(blank=True, max_length=100),
        ),
        migrations.AddField(
            model_name="run",
            name="signature",
            field=models.CharField(blank=True, editable=False, max_length=32),
        ),
        migrations.AlterField(
            model_name="reviewitem",
            name="resolution",
            field=models.CharField(
                blank=True,
                choices=[
                    ("retry", "retry"),
                    ("retry_edited", "retry with edited input"),
                    ("switch_source", "switch source"),
                    ("accept_partial", "accept partial results"),
                    ("abort", "abort"),
                ],
                max_length=20,
            ),
        ),
        migrations.AddIndex(
            model_name="reviewitem",
            index=models.Index(
                condition=models.Q(("state__in", ["open", "claimed"])),
                fields=["created_at", "id"],
                name="review_pending_created",
            ),
        ),
        migrations.AddIndex(
            model_name="reviewitem",
            index=models.Index(
                condition=models.Q(("state", "resolved")),
                fields=["resolved_at", "id"],
                name="review_resolved_at",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("signature", ""), _negated=True),
                fields=["signature", "created_at"],
                name="run_signature_created",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("switched_from__isnull", False)),
                fields=["switched_from"],
                name="run_switched_from",
            ),
        ),
        migrations.RunPython(copy_facets, migrations.RunPython.noop, elidable=True),
    ]
