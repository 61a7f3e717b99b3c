"""Alert rules belong to a project; existing rules to the default one."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("insights", "0005_observations"),
        ("orchestrator", "0030_projects"),
    ]

    operations = [
        migrations.AddField(
            model_name="alertrule",
            name="project",
            field=models.ForeignKey(
                default=1,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="alert_rules",
                to="orchestrator.project",
            ),
        ),
    ]
