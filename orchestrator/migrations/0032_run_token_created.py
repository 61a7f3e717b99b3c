"""A token's own runs in order: run_token_created (token, created_at, id), tokens' runs only.

On the partitioned run table (PostgreSQL) it is built without blocking the writes: an index on
the parent only (invalid until every partition has its own), then each partition's built
CONCURRENTLY and attached to it; partitions created later get it when attached
(`partitions.create`). Re-running after an interruption finishes the job: a partition's index
left invalid by a failed build is dropped and built again. Elsewhere, a plain CREATE INDEX."""

from django.db import migrations, models

PARENT = "orchestrator_run"
NAME = "run_token_created"
DEFINITION = '("token_id", "created_at", "id") WHERE "token_id" IS NOT NULL'
INDEX = models.Index(
    fields=["token", "created_at", "id"],
    name=NAME,
    condition=models.Q(token__isnull=False),
)


def partitions(cursor) -> list[str] | None:
    """The run table's partitions, or None if it is not partitioned."""
    cursor.execute("SELECT 1 FROM pg_partitioned_table WHERE partrelid = to_regclass(%s)", [PARENT])
    if cursor.fetchone() is None:
        return None
    cursor.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = to_regclass(%s) ORDER BY c.relname",
        [PARENT],
    )
    return [name for (name,) in cursor.fetchall()]


def create(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor != "postgresql":
        schema_editor.add_index(apps.get_model("orchestrator", "Run"), INDEX)
        return
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        names = partitions(cursor)
        if names is None:
            schema_editor.add_index(apps.get_model("orchestrator", "Run"), INDEX)
            return
        cursor.execute(f"CREATE INDEX IF NOT EXISTS {NAME} ON ONLY {PARENT} {DEFINITION}")
        for partition in names:
            child = f"{partition}_token_created"[:63]
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
            # Nothing happens for an index attached already.
            cursor.execute(f"ALTER INDEX {NAME} ATTACH PARTITION {quote(child)}")


def drop(apps, schema_editor):
    # On a partitioned table, dropping the parent's index drops its partitions'.
    schema_editor.remove_index(apps.get_model("orchestrator", "Run"), INDEX)


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY cannot run in a transaction.
    atomic = False

    dependencies = [("orchestrator", "0031_spend_budgets")]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="run", index=INDEX)],
            database_operations=[migrations.RunPython(create, drop)],
        ),
    ]
