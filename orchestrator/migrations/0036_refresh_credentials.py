"""Refreshing credentials first is a routing field (on for auth failures, as routing always did
for a source with a refresher), and a run records a decision that refreshed them."""

from django.db import migrations, models


def refresh_auth(apps, schema_editor):
    for name in ("RoutingPolicy", "ProjectPolicy"):
        model = apps.get_model("orchestrator", name)
        model.objects.filter(failure_type="auth_failure").update(refresh_credentials=True)
    # The decisions recorded before: a retry of an auth failure always followed a refresh.
    Run = apps.get_model("orchestrator", "Run")
    Run.objects.filter(decision="retry", failure_type="auth_failure").update(decision_refresh=True)


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0035_worker_pulse"),
    ]

    operations = [
        migrations.AddField(
            model_name="projectpolicy",
            name="refresh_credentials",
            field=models.BooleanField(
                default=False,
                help_text="An auth failure whose caller can refresh its credentials (a source with a refresher, an agent that says it can) is refreshed and retried once before anything else",
            ),
        ),
        migrations.AddField(
            model_name="routingpolicy",
            name="refresh_credentials",
            field=models.BooleanField(
                default=False,
                help_text="An auth failure whose caller can refresh its credentials (a source with a refresher, an agent that says it can) is refreshed and retried once before anything else",
            ),
        ),
        migrations.AddField(
            model_name="run",
            name="decision_refresh",
            field=models.BooleanField(
                default=False,
                help_text="A retry after refreshing the credentials (an auth failure's one)",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("decision_refresh", True)),
                fields=["created_at"],
                name="run_refreshed",
            ),
        ),
        migrations.RunPython(refresh_auth, migrations.RunPython.noop),
    ]
