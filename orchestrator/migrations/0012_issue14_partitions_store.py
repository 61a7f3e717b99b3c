"""PostgreSQL: the run table becomes partitioned by created_at, its unique claims move to RunKey.

The table is rebuilt as `PARTITION BY RANGE (created_at)` with a DEFAULT partition and a partition
per week (Monday to Sunday, UTC) of the runs already stored and of the coming week (beat keeps
creating them ahead: `orchestrator.partitions`; installations migrated before weeks were chosen
got a partition per day, which keeps working beside later week partitions). Its primary key becomes (id, created_at), as partitioning requires;
`id` keeps one sequence, so it stays unique. The model's indexes are created on the parent (each
partition gets its own). The three unique claims (idempotency key per token, slot, retry attempt)
cannot be partitioned unique indexes without `created_at`: a statement-level trigger writes them to
`orchestrator_runkey` in the inserting statement (a second claim fails it) and removes them with
the run. SQLite keeps its plain table and its constraints: this migration does nothing there.
Nothing references the run table with a database foreign key any more (the previous migrations
dropped those constraints), so the old table can go.
"""

from datetime import UTC, datetime, timedelta

from django.db import migrations

AHEAD_DAYS = 7
MONDAY = datetime(1970, 1, 5, tzinfo=UTC).date()  # weeks are counted from a Monday

CLAIMS = """
    SELECT k.key, n.id, n.created_at FROM {rows} n
    CROSS JOIN LATERAL (VALUES
        (CASE WHEN n.idempotency_key <> '' AND n.token_id IS NOT NULL
              THEN 'i:' || n.token_id || ':' || n.idempotency_key END),
        (CASE WHEN n.slot <> '' THEN 's:' || n.slot END),
        (CASE WHEN n.retry_of_id IS NOT NULL THEN 'r:' || n.retry_of_id || ':' || n.attempt END)
    ) AS k(key)
    WHERE k.key IS NOT NULL
"""

TRIGGERS = f"""
CREATE FUNCTION orchestrator_run_claim_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO orchestrator_runkey (key, run_id, created_at) {CLAIMS.format(rows="new_runs")};
    RETURN NULL;
END $$;
CREATE FUNCTION orchestrator_run_release_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM orchestrator_runkey WHERE key IN (
        SELECT key FROM ({CLAIMS.format(rows="old_runs")}) AS released
    );
    RETURN NULL;
END $$;
CREATE TRIGGER run_claim_keys AFTER INSERT ON orchestrator_run
    REFERENCING NEW TABLE AS new_runs FOR EACH STATEMENT
    EXECUTE FUNCTION orchestrator_run_claim_keys();
CREATE TRIGGER run_release_keys AFTER DELETE ON orchestrator_run
    REFERENCING OLD TABLE AS old_runs FOR EACH STATEMENT
    EXECUTE FUNCTION orchestrator_run_release_keys();
"""


def _week_partition(cursor, monday) -> None:
    start = datetime(monday.year, monday.month, monday.day, tzinfo=UTC)
    cursor.execute(
        f'CREATE TABLE "orchestrator_run_p{monday:%Y%m%d}" PARTITION OF orchestrator_run '
        "FOR VALUES FROM (%s) TO (%s)",
        [start, start + timedelta(days=7)],
    )


def _monday_of(day):
    return day - timedelta(days=(day - MONDAY).days % 7)


def partition(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    Run = apps.get_model("orchestrator", "Run")
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("ALTER TABLE orchestrator_run RENAME TO orchestrator_run_unpartitioned")
        cursor.execute(
            "CREATE TABLE orchestrator_run (LIKE orchestrator_run_unpartitioned "
            "INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (created_at)"
        )
        cursor.execute(
            "CREATE TABLE orchestrator_run_default PARTITION OF orchestrator_run DEFAULT"
        )
        cursor.execute(
            "SELECT DISTINCT (created_at AT TIME ZONE 'UTC')::date "
            "FROM orchestrator_run_unpartitioned"
        )
        today = datetime.now(UTC).date()
        stored = {row[0] for row in cursor.fetchall()}
        days = stored | {today + timedelta(days=n) for n in range(AHEAD_DAYS + 1)}
        for monday in sorted({_monday_of(day) for day in days}):
            _week_partition(cursor, monday)
        cursor.execute("INSERT INTO orchestrator_run SELECT * FROM orchestrator_run_unpartitioned")
        cursor.execute("SELECT coalesce(max(id), 0) + 1 FROM orchestrator_run_unpartitioned")
        next_id = cursor.fetchone()[0]
        cursor.execute("DROP TABLE orchestrator_run_unpartitioned")  # its identity sequence too
        cursor.execute("CREATE SEQUENCE orchestrator_run_id_seq OWNED BY orchestrator_run.id")
        cursor.execute("SELECT setval('orchestrator_run_id_seq', %s, false)", [next_id])
        cursor.execute(
            "ALTER TABLE orchestrator_run ALTER id SET DEFAULT nextval('orchestrator_run_id_seq')"
        )
        cursor.execute(
            "ALTER TABLE orchestrator_run ADD CONSTRAINT orchestrator_run_pkey "
            "PRIMARY KEY (id, created_at)"
        )
        for index in Run._meta.indexes:
            schema_editor.add_index(Run, index)
        cursor.execute(TRIGGERS)
        cursor.execute(
            "INSERT INTO orchestrator_runkey (key, run_id, created_at) "
            + CLAIMS.format(rows="orchestrator_run")
        )
        # Retention deletes a dropped day's claims by range; the claims arrive in time order.
        cursor.execute(
            "CREATE INDEX runkey_created_brin ON orchestrator_runkey USING brin (created_at)"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("orchestrator", "0012_issue14_partitions"),
        ("dashboard", "0006_issue14_retention"),
    ]

    operations = [migrations.RunPython(partition, elidable=False)]
