"""Refreshing credentials first is a routing field (on for auth failures, as routing always did
for a source with a refresher), and a run records a decision that refreshed them.

The partial index of those runs (`run_refreshed`) is built as migration 0032 builds its own on the
partitioned run table: on the parent only, then each partition's CONCURRENTLY, attached to it, so
no write waits for it; elsewhere a plain CREATE INDEX."""

import importlib

from django.db import migrations, models

PARENT = "orchestrator_run"
NAME = "run_refreshed"
DEFINITION = '("created_at") WHERE "decision_refresh"'
INDEX = models.Index(
    fields=["created_at"], name=NAME, condition=models.Q(("decision_refresh", True))
)


def create_index(apps, schema_editor):
    connection = schema_editor.connection
    run = apps.get_model("orchestrator", "Run")
    if connection.vendor != "postgresql":
        schema_editor.add_index(run, INDEX)
        return
    partitions = importlib.import_module(
        "orchestrator.migrations.0032_run_token_created"
    ).partitions
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        names = partitions(cursor)
        if names is None:
            schema_editor.add_index(run, INDEX)
            return
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {NAME} ON ONLY {PARENT} {DEFINITION}")
        for partition in names:
            child = f"{partition}_refreshed"[:63]
            cursor.execute(
                "SELECT NOT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)",
                [child],
            )
            invalid = cursor.fetchone()
            if invalid and invalid[0]:
                cursor.execute(f"DROP INDEX CONCURRENTLY {quote(child)}")
            cursor.execute(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {quote(child)} "
                f"ON {quote(partition)} {DEFINITION}"
            )
            cursor.execute(f"ALTER INDEX {NAME} ATTACH PARTITION {quote(child)}")


def drop_index(apps, schema_editor):
    schema_editor.remove_index(apps.get_model("orchestrator", "Run"), INDEX)


def refresh_auth(apps, schema_editor):
    for name in ("RoutingPolicy", "ProjectPolicy"):
        model = apps.get_model("orchestrator", name)
        model.objects.filter(failure_type="auth_failure").update(refresh_credentials=True)
    # The decisions recorded before: a retry of an auth failure always followed a refresh.
    Run = apps.get_model("orchestrator", "Run")
    Run.objects.filter(decision="retry", failure_type="auth_failure").update(decision_refresh=True)


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction.
    atomic = False

    dependencies = [
        ("orchestrator", "0036_review_owners_and_repairs"),
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
        migrations.RunPython(refresh_auth, migrations.RunPython.noop),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="run", index=INDEX)],
            database_operations=[migrations.RunPython(create_index, drop_index)],
        ),
    ]
