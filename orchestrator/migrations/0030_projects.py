"""Projects: the default project (pk 1) holds every existing token, run, workflow and review item
(a column default, so PostgreSQL rewrites no run partition), projects' routing-policy overrides
(in the policy's versions), and their permissions for the operator groups."""

import django.core.management.color
import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

import orchestrator.vocabulary

DEFAULT_PROJECT_ID = 1

GROUPS = {
    "operators": ["view_project", "view_projectpolicy"],
    "policy editors": [
        "view_project",
        "view_projectpolicy",
        "add_projectpolicy",
        "change_projectpolicy",
        "delete_projectpolicy",
    ],
}


def default_project(apps, schema_editor):
    Project = apps.get_model("orchestrator", "Project")
    Project.objects.get_or_create(
        pk=DEFAULT_PROJECT_ID, defaults={"slug": "default", "name": "Default"}
    )
    # The row was written with its key: the key sequence moves past it for the next project.
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        for sql in connection.ops.sequence_reset_sql(
            django.core.management.color.no_style(), [Project]
        ):
            cursor.execute(sql)


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


def project_field(related_name):
    return models.ForeignKey(
        default=DEFAULT_PROJECT_ID,
        on_delete=django.db.models.deletion.PROTECT,
        related_name=related_name,
        to="orchestrator.project",
    )


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("dashboard", "0001_groups"),
        ("orchestrator", "0029_usage_cost_prices"),
    ]

    operations = [
        migrations.CreateModel(
            name="Project",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("slug", models.SlugField(unique=True)),
                ("name", models.CharField(max_length=100)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "groups",
                    models.ManyToManyField(
                        blank=True,
                        help_text="Operators who may see this project (with their usual "
                        "permissions); none: every operator",
                        related_name="projects",
                        to="auth.group",
                    ),
                ),
            ],
            options={"ordering": ["slug"]},
        ),
        migrations.RunPython(default_project, migrations.RunPython.noop),
        migrations.AddField(model_name="apitoken", name="project", field=project_field("tokens")),
        migrations.AddField(
            model_name="reviewitem", name="project", field=project_field("review_items")
        ),
        migrations.AddField(
            model_name="workflow", name="project", field=project_field("workflows")
        ),
        migrations.AddField(
            model_name="run",
            name="project",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                default=DEFAULT_PROJECT_ID,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="orchestrator.project",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("project", DEFAULT_PROJECT_ID), _negated=True),
                fields=["project", "created_at", "id"],
                name="run_project_created",
            ),
        ),
        migrations.AddField(
            model_name="policyversion",
            name="project_policies",
            field=models.JSONField(default=list, help_text="ProjectPolicy.snapshot() of every row"),
        ),
        migrations.CreateModel(
            name="ProjectPolicy",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "max_attempts",
                    models.PositiveSmallIntegerField(
                        help_text="Attempts in all, the first included (1 means never retry)",
                        validators=[
                            django.core.validators.MinValueValidator(1),
                            django.core.validators.MaxValueValidator(20),
                        ],
                    ),
                ),
                (
                    "base_delay",
                    models.FloatField(
                        help_text="Seconds",
                        validators=[django.core.validators.MinValueValidator(0)],
                    ),
                ),
                (
                    "max_delay",
                    models.FloatField(
                        help_text="Seconds",
                        validators=[django.core.validators.MinValueValidator(0)],
                    ),
                ),
                (
                    "multiplier",
                    models.FloatField(
                        default=2.0, validators=[django.core.validators.MinValueValidator(1)]
                    ),
                ),
                (
                    "jitter",
                    models.CharField(
                        choices=[
                            ("full", "full (random between 0 and the delay)"),
                            ("equal", "equal (half fixed, half random)"),
                            ("none", "none (exactly the delay)"),
                        ],
                        default=orchestrator.vocabulary.Jitter["FULL"],
                        max_length=8,
                    ),
                ),
                (
                    "action_when_exhausted",
                    models.CharField(
                        choices=[
                            ("escalate", "escalate"),
                            ("switch_source", "switch source"),
                            ("accept_partial", "accept partial"),
                            ("abort", "abort"),
                        ],
                        max_length=20,
                    ),
                ),
                (
                    "hard_fail",
                    models.BooleanField(
                        default=False,
                        help_text="Never retried blindly (the same request cannot succeed)",
                    ),
                ),
                (
                    "review_deadline",
                    models.PositiveIntegerField(
                        default=86400,
                        help_text="Seconds a review item may wait before its fallback applies",
                    ),
                ),
                (
                    "review_fallback",
                    models.CharField(
                        choices=[("accept_partial", "accept partial"), ("abort", "abort")],
                        default=orchestrator.vocabulary.Action["ACCEPT_PARTIAL"],
                        max_length=20,
                    ),
                ),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "failure_type",
                    models.CharField(
                        choices=[
                            ("transient", "transient"),
                            ("rate_limited", "rate limited"),
                            ("auth_failure", "auth failure"),
                            ("resource_missing", "resource missing"),
                            ("invalid_input", "invalid input"),
                            ("timeout", "timeout"),
                            ("server_fault", "server fault"),
                            ("unclassified", "unclassified"),
                        ],
                        max_length=20,
                    ),
                ),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="policies",
                        to="orchestrator.project",
                    ),
                ),
            ],
            options={
                "verbose_name": "project routing policy",
                "verbose_name_plural": "project routing policies",
                "ordering": ["project", "failure_type"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("project", "failure_type"), name="projectpolicy_unique_type"
                    )
                ],
            },
        ),
        migrations.RunPython(grant, migrations.RunPython.noop),
    ]
