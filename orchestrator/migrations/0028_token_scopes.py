"""Tokens carry scopes. Existing tokens get none: each reads and acts on its own runs, workflows and
review items only, until an operator grants read:all or act:all (the admin, createtoken --scope)."""

from django.db import migrations, models

import orchestrator.models.tokens


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0027_secrets_scrubbed"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="scopes",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="Beyond its own runs, workflows and review items: read:all, act:all",
                validators=[orchestrator.models.tokens.validate_scopes],
            ),
        ),
    ]
