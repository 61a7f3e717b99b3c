"""Counts kept with the runs on PostgreSQL: minute rollups, running totals, per-workflow counters
(the run table's triggers and their folds) and the tile cache keyed by the rollup version (the
search's trigram indexes: tests/orchestrator/test_search_table.py). Each count is checked
against a live count of the runs."""

from __future__ import annotations

import threading
from datetime import UTC, timedelta

import pytest
from django.db import connection, connections, transaction
from django.db.models import Q
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from insights import minutes
from insights.models import MinuteRollup, RunDelta
from insights.stats import (
    KEYS,
    METRICS,
    WINDOWS,
    _minute_sums,
    all_time_counts,
    grouped_runs,
    window_stats,
)
from orchestrator import counters
from orchestrator.models import Run, Workflow, WorkflowCounter, WorkflowRunDelta
from tests.dashboard.conftest import make_failure, make_run, make_workflow, signed_in

HOUR = timedelta(hours=1)


def kept_hour(anchor) -> dict[tuple, dict[str, int]]:
    """The hour from `anchor` as the minute rollups and pending deltas count it."""
    rows = _minute_sums(Q(minute__gte=anchor, minute__lt=anchor + HOUR), KEYS)
    return _nonzero({tuple(r[k] for k in KEYS): {m: r[m] for m in METRICS} for r in rows})


def live_hour(anchor) -> dict[tuple, dict[str, int]]:
    rows = grouped_runs(anchor, anchor + HOUR, "hour")
    return _nonzero(
        {
            (r["status"], r["failure_type"] or "", r["source"]): {m: r[m] for m in METRICS}
            for r in rows
        }
    )


def live_totals() -> dict[tuple, dict[str, int]]:
    totals: dict[tuple, dict[str, int]] = {}
    for r in grouped_runs(timezone.now() - timedelta(days=3650), timezone.now() + HOUR, "year"):
        key = (r["status"], r["failure_type"] or "", r["source"])
        acc = totals.setdefault(key, dict.fromkeys(METRICS, 0))
        for m in METRICS:
            acc[m] += r[m]
    return _nonzero(totals)


def _nonzero(counts: dict[tuple, dict[str, int]]) -> dict[tuple, dict[str, int]]:
    return {k: v for k, v in counts.items() if any(v.values())}


def workflow_counts() -> dict[int, tuple[int, int]]:
    rows = counters.with_run_counts(Workflow.objects.all()).values_list(
        "pk", "run_count", "failure_count"
    )
    return {pk: (runs, failures) for pk, runs, failures in rows}


def live_workflow_counts() -> dict[int, tuple[int, int]]:
    return {
        wf.pk: (wf.runs.count(), wf.runs.filter(status__in=Run.FAILURE).count())
        for wf in Workflow.objects.all()
    }


def this_hour():
    return timezone.now().astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def test_minute_rollups_and_totals_follow_inserts_status_changes_and_deletes(postgres):
    wf = make_workflow()
    runs = [make_run(workflow=wf, source=f"s{i % 3}", status=Run.Status.RUNNING) for i in range(9)]
    make_failure("rate_limited", workflow=wf, partial_count=2, decision="switch_source")
    Run.objects.bulk_create(
        [Run(agent="a", source="bulk", status=Run.Status.SUCCEEDED) for _ in range(50)]
    )
    assert RunDelta.objects.exists()  # written by the triggers, not folded yet
    assert kept_hour(this_hour()) == live_hour(this_hour())

    # status changes move runs between keys, one statement or many
    Run.objects.filter(pk__in=[r.pk for r in runs[:4]]).update(
        status=Run.Status.FAILED, failure_type="timeout", decision="retry", retryable=False
    )
    runs[5].status = Run.Status.SUCCEEDED
    runs[5].save()
    assert minutes.fold() > 0
    assert not RunDelta.objects.exists() and MinuteRollup.objects.exists()
    Run.objects.filter(pk=runs[6].pk).update(
        status=Run.Status.ESCALATED, failure_type="auth_failure"
    )
    Run.objects.filter(pk=runs[7].pk).delete()
    assert kept_hour(this_hour()) == live_hour(this_hour())
    assert _nonzero(all_time_counts()) == live_totals()
    minutes.fold()
    assert kept_hour(this_hour()) == live_hour(this_hour())
    assert _nonzero(all_time_counts()) == live_totals()
    assert workflow_counts() == live_workflow_counts()


def test_an_update_that_changes_no_counted_column_appends_no_delta(postgres):
    run = make_run(status=Run.Status.RUNNING)
    minutes.fold()
    counters.fold_workflow_counters()
    Run.objects.filter(pk=run.pk).update(detail="heartbeat", lease_until=timezone.now())
    assert not RunDelta.objects.exists()
    assert not WorkflowRunDelta.objects.exists()


def test_the_workflow_counters_follow_runs_moving_between_workflows_and_deleted_workflows(postgres):
    first, second = make_workflow(name="one"), make_workflow(name="two")
    runs = [make_run(workflow=first) for _ in range(3)] + [make_failure(workflow=second)]
    counters.fold_workflow_counters()
    assert workflow_counts() == live_workflow_counts() == {first.pk: (3, 0), second.pk: (1, 1)}
    Run.objects.filter(pk=runs[0].pk).update(workflow=second, status=Run.Status.FAILED)
    assert workflow_counts() == live_workflow_counts() == {first.pk: (2, 0), second.pk: (2, 2)}
    second.delete()  # its runs' deltas arrive after its counter would have gone
    assert counters.fold_workflow_counters() > 0
    assert workflow_counts() == {first.pk: (2, 0)}
    assert not WorkflowCounter.objects.filter(workflow_id=second.pk).exists()


def test_the_workflows_list_shows_the_counters(postgres, operator):
    wf = make_workflow(name="counted")
    for _ in range(4):
        make_run(workflow=wf)
    make_failure(workflow=wf)
    counters.fold_workflow_counters()
    make_failure(workflow=wf)  # pending, not folded yet: still counted
    page = signed_in(operator).get("/workflows/").content.decode()
    assert "<td>6 <span" in page and "2 failed" in page


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_counts_agree_with_a_live_count_under_concurrent_writers_and_folds(postgres):
    """Writers in their own transactions (some rolled back) insert and change runs while folds
    run beside them: the kept counts equal a live count afterwards."""
    workflows = [make_workflow(name=f"w{i}") for i in range(3)]
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(n: int) -> None:
        try:
            for i in range(12):
                try:
                    with transaction.atomic():
                        batch = Run.objects.bulk_create(
                            Run(
                                agent="a",
                                source=f"s{(n + j) % 4}",
                                workflow=workflows[(n + j) % 3],
                                status=Run.Status.RUNNING,
                            )
                            for j in range(20)
                        )
                        Run.objects.filter(pk__in=[r.pk for r in batch[:7]]).update(
                            status=Run.Status.FAILED, failure_type="timeout", partial_count=1
                        )
                        if i % 4 == 3:
                            raise RuntimeError("rolled back")
                except RuntimeError:
                    pass
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    def folder() -> None:
        try:
            while not stop.is_set():
                minutes.fold()
                counters.fold_workflow_counters()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    fold_thread = threading.Thread(target=folder)
    fold_thread.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    fold_thread.join()
    assert not errors, errors
    assert Run.objects.count() == 4 * 9 * 20
    assert kept_hour(this_hour()) == live_hour(this_hour())
    assert _nonzero(all_time_counts()) == live_totals()
    assert workflow_counts() == live_workflow_counts()
    minutes.fold()
    counters.fold_workflow_counters()
    assert kept_hour(this_hour()) == live_hour(this_hour())
    assert workflow_counts() == live_workflow_counts()


def test_the_one_hour_window_reads_minutes_and_agrees_with_live_minutes(postgres, operator):
    for i in range(5):
        make_failure("timeout", created_at=timezone.now() - timedelta(minutes=3 * i))
    make_run(created_at=timezone.now() - timedelta(minutes=70))  # the window before
    minutes.fold()
    make_failure("server_fault")
    page = signed_in(operator).get("/?window=1h").content.decode()
    assert 'data-tile="ft-timeout"' in page and 'data-tile="ft-server_fault"' in page
    stats = window_stats(WINDOWS["1h"])
    assert stats.current.by_type == {"timeout": 5, "server_fault": 1}
    assert stats.previous.runs == 1
    assert sum(stats.series[""]) == 6


def test_the_overview_tiles_come_from_the_cache_until_the_counts_change(postgres, operator):
    client = signed_in(operator)
    make_failure("timeout")
    minutes.fold()
    first = client.get("/?window=24h").content.decode()
    with CaptureQueriesContext(connection) as cold:
        client.get("/?window=24h")
    rollup_reads = [q for q in cold.captured_queries if "dashboard_sixhourrollup" in q["sql"]]
    assert not rollup_reads  # rendered tiles served from the cache
    assert ">1<" in first.split('data-tile="runs"', 1)[1][:600]
    make_failure("rate_limited")  # a new delta: a new version, so new tiles
    second = client.get("/?window=24h").content.decode()
    assert 'data-tile="ft-rate_limited"' in second
    assert ">2<" in second.split('data-tile="runs"', 1)[1][:600]


def test_the_fold_keeps_a_few_hours_of_minutes_and_every_run_in_the_totals(postgres):
    make_run(created_at=timezone.now() - minutes.KEEP - timedelta(minutes=5))
    make_run()
    minutes.fold()
    kept = MinuteRollup.objects.values_list("minute", flat=True)
    assert len(kept) == 1 and min(kept) >= timezone.now() - minutes.KEEP
    assert all_time_counts()[("succeeded", "", "web_search")]["count"] == 2


def test_retention_leaves_the_running_totals_and_workflow_counts_alone(postgres, settings):
    """Old runs pruned row by row (the default partition) or by partition (a dropped one) take
    nothing away from /metrics' totals nor the workflows' counts; an operator's delete does."""
    from insights import retention
    from orchestrator import partitions

    settings.RUNS_RETENTION_DAYS, settings.ROLLUP_RETENTION_DAYS = 30, 400
    flow = make_workflow()
    old_day = timezone.now() - timedelta(days=40)
    partitions.cover(old_day.date(), old_day.date())
    make_failure(workflow=flow, created_at=old_day)  # in its partition
    make_failure(workflow=flow, created_at=timezone.now() - timedelta(days=48))  # the default's
    current = make_run(workflow=flow)
    minutes.fold()
    counters.fold_workflow_counters()
    before = all_time_counts()
    assert workflow_counts() == {flow.pk: (3, 2)}

    retention.apply()
    minutes.fold()
    counters.fold_workflow_counters()

    assert list(Run.objects.values_list("pk", flat=True)) == [current.pk]
    assert all_time_counts() == before
    assert workflow_counts() == {flow.pk: (3, 2)}
    current.delete()  # not retention: a correction, which the counts follow
    minutes.fold()
    assert all_time_counts()[("succeeded", "", "web_search")]["count"] == 0
