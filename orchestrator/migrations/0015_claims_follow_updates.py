"""PostgreSQL: a run's unique claims follow an UPDATE of the columns they are made of.

The claims (`orchestrator_runkey`: idempotency key per token, slot, retry attempt) were written
when a run was inserted and removed when it was deleted; an edit of a run's key, slot, retry or
creation time (the admin, a correction) left the old claim behind and made no new one, so the
old key stayed taken by a run that no longer carried it and the new one was not unique. A
statement trigger on UPDATE now removes the claims that no longer hold and writes the new ones
(a new claim another run holds fails the UPDATE, as the unique constraints do on SQLite). Most
updates change no claimed column: both differences are then empty.
"""

from django.db import migrations

CLAIMS = """
    SELECT k.key, n.id, n.created_at FROM {rows} n
    CROSS JOIN LATERAL (VALUES
        (CASE WHEN n.idempotency_key <> '' AND n.token_id IS NOT NULL
              THEN 'i:' || n.token_id || ':' || n.idempotency_key END),
        (CASE WHEN n.slot <> '' THEN 's:' || n.slot END),
        (CASE WHEN n.retry_of_id IS NOT NULL THEN 'r:' || n.retry_of_id || ':' || n.attempt END)
    ) AS k(key)
    WHERE k.key IS NOT NULL
"""  # as in 0012_issue14_partitions_store: a migration keeps its own copy

TRIGGER = f"""
CREATE FUNCTION orchestrator_run_reclaim_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM orchestrator_runkey WHERE (key, run_id, created_at) IN (
        SELECT * FROM ({CLAIMS.format(rows="old_runs")}) o
        EXCEPT SELECT * FROM ({CLAIMS.format(rows="new_runs")}) n
    );
    INSERT INTO orchestrator_runkey (key, run_id, created_at)
        SELECT * FROM ({CLAIMS.format(rows="new_runs")}) n
        EXCEPT SELECT * FROM ({CLAIMS.format(rows="old_runs")}) o;
    RETURN NULL;
END $$;
CREATE TRIGGER run_reclaim_keys AFTER UPDATE ON orchestrator_run
    REFERENCING OLD TABLE AS old_runs NEW TABLE AS new_runs FOR EACH STATEMENT
    EXECUTE FUNCTION orchestrator_run_reclaim_keys();
"""

DROP = """
DROP TRIGGER IF EXISTS run_reclaim_keys ON orchestrator_run;
DROP FUNCTION IF EXISTS orchestrator_run_reclaim_keys();
"""


def install(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(TRIGGER)


def uninstall(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP)


class Migration(migrations.Migration):
    dependencies = [("orchestrator", "0014_issue16_analytics")]

    operations = [migrations.RunPython(install, uninstall)]
