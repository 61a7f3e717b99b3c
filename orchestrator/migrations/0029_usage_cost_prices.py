"""What runs cost: usage (tokens, model) and cost (amount, currency, where it came from) on every
run, and the price table (per model's tokens, per source's call, from an effective date on), part of
the policy's versions, with its permissions for the operator groups."""

from decimal import Decimal

import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

GROUPS = {
    "operators": ["view_price"],
    "policy editors": ["view_price", "add_price", "change_price", "delete_price"],
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
        ("orchestrator", "0028_token_scopes"),
        ("dashboard", "0001_groups"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="policyversion",
            name="prices",
            field=models.JSONField(default=list, help_text="Price.snapshot() of every row"),
        ),
        migrations.AddField(
            model_name="run",
            name="cached_tokens",
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="cost",
            field=models.DecimalField(
                blank=True,
                decimal_places=6,
                max_digits=14,
                null=True,
                validators=[django.core.validators.MinValueValidator(Decimal("0"))],
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="cost_currency",
            field=models.CharField(
                default="USD",
                max_length=3,
                validators=[
                    django.core.validators.RegexValidator(
                        "^[A-Z]{3}\\Z", "A currency is an ISO 4217 code: three capital letters."
                    )
                ],
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="cost_source",
            field=models.CharField(
                blank=True,
                choices=[
                    ("reported", "reported by the agent"),
                    ("priced", "priced from the price table"),
                ],
                max_length=10,
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="input_tokens",
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="model",
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AddField(
            model_name="run",
            name="output_tokens",
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="Price",
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
                            ("model", "model (per million tokens)"),
                            ("source_call", "source call (per call)"),
                        ],
                        max_length=20,
                    ),
                ),
                (
                    "name",
                    models.CharField(
                        help_text="The model's name as agents report it, or the source's name",
                        max_length=200,
                    ),
                ),
                (
                    "effective_from",
                    models.DateTimeField(
                        default=django.utils.timezone.now,
                        help_text="Runs started from this time on (until the next row's) are priced by this row",
                    ),
                ),
                (
                    "input_per_million",
                    models.DecimalField(
                        blank=True,
                        decimal_places=6,
                        help_text="Per million input tokens (a model)",
                        max_digits=14,
                        null=True,
                        validators=[django.core.validators.MinValueValidator(Decimal("0"))],
                    ),
                ),
                (
                    "output_per_million",
                    models.DecimalField(
                        blank=True,
                        decimal_places=6,
                        help_text="Per million output tokens (a model)",
                        max_digits=14,
                        null=True,
                        validators=[django.core.validators.MinValueValidator(Decimal("0"))],
                    ),
                ),
                (
                    "cached_per_million",
                    models.DecimalField(
                        blank=True,
                        decimal_places=6,
                        help_text="Per million cached input tokens (a model); blank: the input price",
                        max_digits=14,
                        null=True,
                        validators=[django.core.validators.MinValueValidator(Decimal("0"))],
                    ),
                ),
                (
                    "per_call",
                    models.DecimalField(
                        blank=True,
                        decimal_places=6,
                        help_text="Per call (a source)",
                        max_digits=14,
                        null=True,
                        validators=[django.core.validators.MinValueValidator(Decimal("0"))],
                    ),
                ),
                (
                    "currency",
                    models.CharField(
                        default="USD",
                        max_length=3,
                        validators=[
                            django.core.validators.RegexValidator(
                                "^[A-Z]{3}\\Z",
                                "A currency is an ISO 4217 code: three capital letters.",
                            )
                        ],
                    ),
                ),
                ("note", models.CharField(blank=True, max_length=300)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["kind", "name", "-effective_from"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("kind", "name", "effective_from"), name="price_unique_effective"
                    )
                ],
            },
        ),
        migrations.RunPython(grant, migrations.RunPython.noop),
    ]
