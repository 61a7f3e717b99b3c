"""The run store's partitions and retention: the coming days covered ahead by beat (a week per
partition, gaps only beside partitions of another span), the default partition taken over by a
late partition, unique claims across partitions, whole partitions dropped past RUNS_RETENTION_DAYS
with what pointed at their runs, rollups kept for ROLLUP_RETENTION_DAYS."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.db import IntegrityError, connection, transaction

from insights import retention
from insights.models import FailureGroup, RunRollup
from orchestrator import partitions, tasks
from orchestrator.ingest import accept
from orchestrator.models import ReviewItem, Run, RunKey, Workflow

FAR = datetime(2031, 3, 10, 12, tzinfo=UTC)  # beyond the partitions the migration created


def where(run_id: int) -> str:
    """The partition holding a run."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tableoid::regclass::text FROM orchestrator_run WHERE id = %s", [run_id]
        )
        return cursor.fetchone()[0]


def report(token_id: int, key: str, **fields) -> dict:
    item = {"agent": "a", "source": "s", "status": "ok", "idempotency_key": key} | fields
    return accept(token_id, [item])[0].as_dict()


def run_at(when: datetime, **fields) -> Run:
    return Run.objects.create(agent="a", source="s", status="failed", created_at=when, **fields)


def partition_of(day) -> str:
    """The name of the partition that should hold `day` (its period's first day)."""
    return partitions.name_of(partitions.period_of(day)[0])


def test_beat_covers_the_coming_days_with_week_partitions_and_runs_land_in_theirs(
    postgres, settings
):
    settings.RUN_PARTITIONS_AHEAD = 3
    assert FAR.date().isoweekday() == 1  # weeks run Monday to Sunday
    with time_machine.travel(FAR + timedelta(days=5), tick=False):  # a Saturday: 3 days ahead
        created = tasks.create_run_partitions()  # reach into the next week
        assert created == ["orchestrator_run_p20310310", "orchestrator_run_p20310317"]
        assert tasks.create_run_partitions() == []  # idempotent: beat may run it every hour
    assert partitions.ranges()["orchestrator_run_p20310310"] == (
        datetime(2031, 3, 10, tzinfo=UTC),
        datetime(2031, 3, 17, tzinfo=UTC),
    )
    run = run_at(FAR + timedelta(days=8))
    assert where(run.pk) == "orchestrator_run_p20310317"
    assert Run.objects.get(pk=run.pk).created_at == FAR + timedelta(days=8)


def test_partitions_of_another_span_are_kept_and_only_the_gaps_are_covered(postgres, settings):
    """Day partitions (the span before RUN_PARTITION_DAYS was a week) stay; the week around
    them gets partitions for what they leave uncovered, and retention drops by real bounds."""
    settings.RUN_PARTITION_DAYS = 1
    assert partitions.cover(FAR.date(), FAR.date() + timedelta(days=1)) == [
        "orchestrator_run_p20310310",
        "orchestrator_run_p20310311",
    ]
    settings.RUN_PARTITION_DAYS = 7
    assert partitions.cover(FAR.date(), FAR.date() + timedelta(days=6)) == [
        "orchestrator_run_p20310312"
    ]
    bounds = partitions.ranges()
    assert bounds["orchestrator_run_p20310311"] == (
        datetime(2031, 3, 11, tzinfo=UTC),
        datetime(2031, 3, 12, tzinfo=UTC),
    )
    assert bounds["orchestrator_run_p20310312"] == (
        datetime(2031, 3, 12, tzinfo=UTC),
        datetime(2031, 3, 17, tzinfo=UTC),
    )
    late = run_at(FAR + timedelta(days=4))
    assert where(late.pk) == "orchestrator_run_p20310312"
    dropped = partitions.drop_before(datetime(2031, 3, 12, 6, tzinfo=UTC))  # and today's
    assert dropped[-2:] == ["orchestrator_run_p20310310", "orchestrator_run_p20310311"]
    assert "orchestrator_run_p20310312" in partitions.ranges()  # not wholly before the cutoff
    assert Run.objects.filter(pk=late.pk).exists()


def test_a_run_no_partition_covers_goes_to_the_default_and_moves_when_its_partition_comes(
    postgres, api_token
):
    token, _ = api_token
    with time_machine.travel(FAR, tick=False):
        stored = report(token.pk, "late-1")
    assert stored["status"] == "created"
    assert where(stored["id"]) == partitions.DEFAULT

    partitions.cover(FAR.date(), FAR.date())

    assert where(stored["id"]) == partition_of(FAR.date())
    # its claim moved with it: the same report again is the stored run, not a second one
    again = report(token.pk, "late-1")
    assert (again["status"], again["id"]) == ("existing", stored["id"])


def test_an_idempotency_key_holds_across_days(postgres, api_token):
    token, _ = api_token
    first = report(token.pk, "k-1")
    with time_machine.travel(datetime.now(UTC) + timedelta(days=2)):
        again = report(token.pk, "k-1")
        other = report(token.pk, "k-1", agent="b")
    assert where(first["id"]) != partitions.DEFAULT
    assert (again["status"], again["id"]) == ("existing", first["id"])
    assert other["status"] == "rejected" and "already used" in other["error"]["detail"]
    assert Run.objects.filter(idempotency_key="k-1").count() == 1


def test_a_slot_is_claimed_once_whatever_the_day(postgres):
    wf = Workflow.objects.create(name="w")
    run_at(datetime.now(UTC), workflow=wf, slot=f"{wf.pk}:t:s")
    with pytest.raises(IntegrityError), transaction.atomic():
        run_at(datetime.now(UTC) + timedelta(days=3), workflow=wf, slot=f"{wf.pk}:t:s")


def test_claims_have_their_primary_key_and_no_pattern_index(postgres):
    # A claim is looked up by equality only; the LIKE index Django builds beside a varchar key
    # (varchar_pattern_ops) cost every inserted run a B-tree write per claim (migration 0017).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'orchestrator_runkey'"
            " AND schemaname = current_schema()"
        )
        indexes = [row[0] for row in cursor.fetchall()]
    assert any("UNIQUE" in d and "(key)" in d for d in indexes), indexes
    assert not [d for d in indexes if "pattern_ops" in d], indexes
    # the key lookups still read the primary key
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(
            "EXPLAIN SELECT key FROM orchestrator_runkey WHERE key = ANY(%s)", [["i:1:k-1"]]
        )
        plan = " ".join(row[0] for row in cursor.fetchall())
    assert "orchestrator_runkey_pkey" in plan, plan


def test_deleting_a_run_releases_its_claims(postgres, api_token):
    token, _ = api_token
    stored = report(token.pk, "gone-1")
    assert RunKey.objects.filter(run_id=stored["id"]).exists()
    Run.objects.filter(pk=stored["id"]).delete()
    assert not RunKey.objects.filter(run_id=stored["id"]).exists()
    assert report(token.pk, "gone-1")["status"] == "created"


def test_editing_a_runs_key_or_slot_moves_its_claims(postgres, api_token):
    """An edit (the admin's, a correction) frees the old key and claims the new one; a new
    claim another run holds refuses the edit, as SQLite's unique constraints do."""
    token, _ = api_token
    edited, other = report(token.pk, "before-edit"), report(token.pk, "taken")
    Run.objects.filter(pk=edited["id"]).update(idempotency_key="after-edit", slot="edited-slot")

    claims = set(RunKey.objects.filter(run_id=edited["id"]).values_list("key", flat=True))
    assert claims == {f"i:{token.pk}:after-edit", "s:edited-slot"}
    assert report(token.pk, "before-edit")["status"] == "created"  # the old key is free
    again = report(token.pk, "after-edit")  # the new key finds the edited run
    assert (again["status"], again["id"]) == ("existing", edited["id"])
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.filter(pk=other["id"]).update(idempotency_key="after-edit")
    Run.objects.filter(pk=edited["id"]).update(status=Run.Status.FAILED)  # no claimed column
    assert RunKey.objects.filter(run_id=edited["id"]).count() == 2


@pytest.mark.parametrize("partitioned", [True, False], ids=["partitions", "row-deletes"])
def test_retention_drops_old_runs_with_what_pointed_at_them_and_keeps_rollups(
    db, settings, partitioned
):
    settings.RUNS_RETENTION_DAYS, settings.ROLLUP_RETENTION_DAYS = 30, 400
    now = datetime.now(UTC)
    old_day = now - timedelta(days=40)
    if partitioned and partitions.is_partitioned():
        partitions.cover(old_day.date(), old_day.date())
    elif partitioned:
        pytest.skip("the run partitions exist on PostgreSQL only")
    old = run_at(old_day, slot="old-slot")
    in_default = now - timedelta(days=48)  # no partition covers it: the default partition
    old_in_default = run_at(in_default)
    if partitioned:
        assert where(old_in_default.pk) == partitions.DEFAULT
    kept = run_at(now - timedelta(days=1), retry_of=old, attempt=2, switched_from=old)
    item = ReviewItem.objects.create(run=old, reason="stuck")
    group = FailureGroup.objects.create(
        signature="sig",
        source="s",
        failure_type="timeout",
        example_run=old,
        example="timed out",
        first_seen=old_day,
        last_seen=old_day,
    )
    RunRollup.objects.create(hour=old_day, status="failed", source="s", count=1)
    RunRollup.objects.create(hour=now - timedelta(days=500), status="failed", source="s", count=1)

    pruned = retention.apply(now)

    assert set(Run.objects.values_list("pk", flat=True)) == {kept.pk}
    assert not ReviewItem.objects.filter(pk=item.pk).exists()
    kept.refresh_from_db()
    assert (kept.retry_of_id, kept.switched_from_id) == (None, None)
    group.refresh_from_db()
    assert (group.example_run_id, group.example) == (None, "timed out")
    assert list(RunRollup.objects.values_list("hour", flat=True)) == [old_day]  # 40 < 400 days
    assert pruned.rollup_rows == 1
    assert not Run.objects.filter(pk=old_in_default.pk).exists()
    if partitioned:
        assert pruned.partitions == [partition_of(old_day.date())]
        assert partition_of(old_day.date()) not in partitions.ranges()
        assert not RunKey.objects.filter(key="s:old-slot").exists()
    run_at(now, slot="old-slot")  # the dropped run's claim is free again


def test_retention_setting_of_zero_keeps_runs(db, settings):
    settings.RUNS_RETENTION_DAYS, settings.ROLLUP_RETENTION_DAYS = 0, 0
    run = run_at(datetime(2001, 1, 1, tzinfo=UTC))
    assert retention.apply().partitions == []
    assert Run.objects.filter(pk=run.pk).exists()


def test_queries_are_not_jit_compiled(postgres):
    """A query over the partitions is planned with a node per partition and estimated
    costly, and PostgreSQL's JIT then spent a minute compiling what runs in a third of a
    second (the failure endings of one hour at 10M runs): the settings turn it off."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW jit")
        assert cursor.fetchone()[0] == "off"
