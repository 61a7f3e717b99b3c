"""Secrets filtered at the door: operators' scrub rules (part of the policy, in its versions),
the count of values filtered on each run, and the rules' permissions for the operator groups."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

GROUPS = {
    "operators": ["view_scrubrule"],
    "policy editors": ["view_scrubrule", "add_scrubrule", "change_scrubrule", "delete_scrubrule"],
}


def grant(apps, schema_editor):
    from django.contrib.auth.management import create_permissions

    config = apps.get_app_config("orchestrator")
    config.models_module = True
    create_permissions(config, verbosity=0, apps=apps)
    config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in GROUPS.items():
        perms = Permission.objects.filter(
            content_type__app_label="orchestrator", codename__in=codenames
        )
        for group in Group.objects.filter(name=name):
            group.permissions.add(*perms)


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0026_beat_ticks"),
        ("dashboard", "0001_groups"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ScrubRule",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "kind",
                    models.CharField(
                        choices=[
                            ("key", "key name (its values are secrets)"),
                            ("pattern", "pattern (a regular expression; its matches are secrets)"),
                            ("safe_field", "safe field (its values are never filtered)"),
                        ],
                        max_length=20,
                    ),
                ),
                (
                    "value",
                    models.CharField(
                        help_text="A key name (matched whatever its case and separators, also at the end of a longer key: ssn matches Customer-SSN), a regular expression (only its group named 'secret' is filtered, if it has one), or a safe field's key name",
                        max_length=300,
                    ),
                ),
                ("note", models.CharField(blank=True, max_length=300)),
                ("enabled", models.BooleanField(default=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                "ordering": ["kind", "value"],
            },
        ),
        migrations.AddField(
            model_name="policyversion",
            name="scrub_rules",
            field=models.JSONField(default=list, help_text="ScrubRule.snapshot() of every row"),
        ),
        migrations.AddField(
            model_name="run",
            name="scrubbed_fields",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("scrubbed_fields__gt", 0)),
                fields=["created_at"],
                include=("scrubbed_fields",),
                name="run_scrubbed",
            ),
        ),
        migrations.AddField(
            model_name="scrubrule",
            name="created_by",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        migrations.AddConstraint(
            model_name="scrubrule",
            constraint=models.UniqueConstraint(
                fields=("kind", "value"), name="scrubrule_unique_value"
            ),
        ),
        migrations.RunPython(grant, migrations.RunPython.noop),
    ]
