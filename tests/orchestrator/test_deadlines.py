"""The running deadline: a run an agent reported `running` and never finished is failed as a
timeout by the sweeper, once, through the agent's own finish; its workflow settles; a token may
have a deadline of its own (admin, createtoken)."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from django.utils import timezone

from insights import groups
from insights.models import FailureGroup
from orchestrator import tasks
from orchestrator.coordination import dispatch
from orchestrator.coordination import workflow as coordination
from orchestrator.coordination.deadlines import finish_overdue_runs
from orchestrator.fingerprint import signature
from orchestrator.models import ApiToken, AuditEntry, OutboxMessage, Run, Workflow
from orchestrator.vocabulary import Coordinator

NOW = timezone.now().replace(microsecond=0)


def reported(token: ApiToken | None, minutes_ago: float, **fields: Any) -> Run:
    fields.setdefault("agent", "crm-agent")
    fields.setdefault("source", "crm_api")
    fields.setdefault("status", Run.Status.RUNNING)
    return Run.objects.create(
        token=token, created_at=NOW - timedelta(minutes=minutes_ago), **fields
    )


@pytest.fixture
def token(db) -> ApiToken:
    return ApiToken.issue("crm-agent")[0]


@pytest.fixture(autouse=True)
def _fifteen_minutes(settings) -> None:
    settings.RUN_RUNNING_TIMEOUT = 15 * 60


def test_a_run_past_its_deadline_fails_as_a_timeout_with_no_finish_reported(token):
    old = reported(token, 16, started_at=NOW - timedelta(minutes=20))
    young = reported(token, 14)
    coordinators = reported(None, 24 * 60, lease_owner="host:1", lease_until=NOW)
    finished = reported(token, 60, status=Run.Status.SUCCEEDED)
    assert finish_overdue_runs(NOW) == 1
    old.refresh_from_db()
    assert (old.status, old.failure_type) == (Run.Status.FAILED, "timeout")
    assert "no finish reported within 15 min" in old.detail
    assert old.exception_type == Run.NO_FINISH_REPORTED and old.finished_by_deadline
    assert old.finished_at == NOW and old.duration_ms == 20 * 60 * 1000
    assert old.signature == signature("crm_api", "timeout", old.detail)
    assert list(Run.objects.in_flight().order_by("pk")) == [young, coordinators]
    coordinators.refresh_from_db()
    assert coordinators.lease_owner == "host:1"  # the built-in executor's runs keep their lease
    assert Run.objects.get(pk=finished.pk).status == Run.Status.SUCCEEDED
    assert finish_overdue_runs(NOW) == 0  # nothing left, nothing finished twice


def test_a_tokens_own_running_timeout_overrides_the_default(db):
    short = ApiToken.issue("quick-agent", running_timeout=timedelta(minutes=1))[0]
    long = ApiToken.issue("batch-agent", running_timeout=timedelta(hours=2))[0]
    default = ApiToken.issue("plain-agent")[0]
    quick = reported(short, 2)
    patient = reported(long, 60)
    plain = reported(default, 20)
    assert (quick.running_deadline, patient.running_deadline) == (
        quick.created_at + timedelta(minutes=1),
        patient.created_at + timedelta(hours=2),
    )
    assert finish_overdue_runs(NOW) == 2
    statuses = dict(Run.objects.values_list("pk", "status"))
    assert statuses == {quick.pk: "failed", patient.pk: "running", plain.pk: "failed"}
    assert "within 1 min" in Run.objects.get(pk=quick.pk).detail
    assert finish_overdue_runs(NOW + timedelta(minutes=61)) == 1


def test_the_beats_sweep_finishes_them(token):
    run = reported(token, 0)
    Run.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=1))
    tasks.sweep()
    assert Run.objects.get(pk=run.pk).status == Run.Status.FAILED


def test_a_batch_is_bounded_and_the_oldest_go_first(token):
    runs = [reported(token, 30 + i) for i in range(5)]
    assert finish_overdue_runs(NOW, limit=2) == 2
    failed = set(Run.objects.filter(status="failed").values_list("pk", flat=True))
    assert failed == {runs[4].pk, runs[3].pk}
    assert finish_overdue_runs(NOW, limit=10) == 3


def test_an_agents_workflow_settles_once_nothing_is_in_flight(token):
    wf = Workflow.objects.create(
        name="crm research", topics=["acme", "globex"], coordinator=Coordinator.EXTERNAL
    )
    reported(token, 30, workflow=wf, topic="acme", status="succeeded", result_count=2)
    stuck = reported(token, 20, workflow=wf, topic="globex")
    reported(token, 1, workflow=wf, topic="globex", source="other_api")
    assert finish_overdue_runs(NOW) == 1
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.RUNNING  # another run is still in flight
    assert finish_overdue_runs(NOW + timedelta(minutes=15)) == 1
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.DEGRADED and wf.finished_at is not None
    assert wf.coverage["globex"]["verdict"] == "gap"
    assert "crm_api could not be reached (timeout)" in wf.coverage["globex"]["why"]
    assert Run.objects.get(pk=stuck.pk).finished_by_deadline


def test_a_built_in_workflow_is_stepped_and_routes_the_timeout(token):
    wf = Workflow.objects.create(name="research", topics=["film"], capability="web_research")
    run = reported(token, 20, workflow=wf, topic="film", source="web_search")
    OutboxMessage.objects.all().delete()
    assert finish_overdue_runs(NOW) == 1
    steps = OutboxMessage.objects.filter(task=dispatch.STEP_TASK)
    assert [m.args for m in steps] == [[wf.pk, None]]
    coordination.step(wf.pk)
    run.refresh_from_db()
    assert run.decision  # the coordinator routed the timeout like any other failure


def test_the_timed_out_run_joins_its_failure_group_like_any_timeout(token):
    run = reported(token, 20)
    finish_overdue_runs(NOW)
    groups.fold()
    group = FailureGroup.objects.get(signature=Run.objects.get(pk=run.pk).signature)
    assert (group.failure_type, group.source) == ("timeout", "crm_api")
    assert Run.objects.failures().filter(pk=run.pk).exists()


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_concurrent_sweepers_finish_each_run_once(postgres):
    from tests.api.test_concurrency import THREADS, race

    token = ApiToken.issue("crm-agent")[0]
    wf = Workflow.objects.create(name="crm", topics=["t"], coordinator=Coordinator.EXTERNAL)
    runs = [reported(token, 20 + i, workflow=wf, topic="t") for i in range(30)]
    counts = race(lambda _client: finish_overdue_runs(NOW, limit=10))
    assert len(counts) == THREADS
    # Whatever the interleaving, every finish is won once; later sweeps take the rest.
    total = sum(counts)
    while remaining := finish_overdue_runs(NOW):
        total += remaining
    assert total == len(runs)
    assert Run.objects.filter(status="failed", finished_at=NOW).count() == len(runs)
    assert Workflow.objects.get(pk=wf.pk).status == Workflow.Status.FAILED


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_sweeper_and_the_agents_late_finish_never_both_win(postgres):
    from tests.api.test_concurrency import race

    token = ApiToken.issue("crm-agent")[0]
    runs = [reported(token, 20) for _ in range(20)]
    ok = {"status": "ok", "results": [{"row": 1}]}

    def work(_client: Any) -> int:
        return finish_overdue_runs(NOW) + sum(
            Run.objects.get(pk=run.pk).finish_reported(ok, NOW) for run in runs
        )

    assert sum(race(work)) == len(runs)
    for run in Run.objects.filter(pk__in=[r.pk for r in runs]):
        assert run.status == "succeeded" or run.finished_by_deadline


def test_createtoken_sets_a_running_timeout(db):
    out = io.StringIO()
    call_command("createtoken", "slow-agent", "--running-timeout", "3600", stdout=out)
    token = ApiToken.objects.authenticate(out.getvalue().strip())
    assert token.running_timeout == timedelta(hours=1)
    entry = AuditEntry.objects.get(action="apitoken.create", object_id=str(token.pk))
    assert entry.after["running_timeout"] == 3600
    with pytest.raises(CommandError, match="at least 1 second"):
        call_command("createtoken", "bad-agent", "--running-timeout", "0", stdout=io.StringIO())
    plain = io.StringIO()
    call_command("createtoken", "plain-agent", stdout=plain)
    default = ApiToken.objects.authenticate(plain.getvalue().strip())
    assert default.running_timeout is None
    assert default.effective_running_timeout == timedelta(minutes=15)


def test_the_admin_sets_and_audits_a_tokens_running_timeout(admin_client, admin_user):
    add = reverse("admin:orchestrator_apitoken_add")
    admin_client.post(add, {"name": "scholar-agent", "running_timeout": "600"})
    token = ApiToken.objects.get(name="scholar-agent")
    assert token.running_timeout == timedelta(minutes=10)
    change = reverse("admin:orchestrator_apitoken_change", args=[token.pk])
    response = admin_client.post(change, {"name": "scholar-agent", "running_timeout": "01:00:00"})
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.running_timeout == timedelta(hours=1)
    entry = AuditEntry.objects.get(action="apitoken.running_timeout", object_id=str(token.pk))
    assert (entry.before, entry.after) == ({"running_timeout": 600}, {"running_timeout": 3600})
    assert entry.actor == admin_user
    refused = admin_client.post(change, {"name": "scholar-agent", "running_timeout": "0"})
    assert refused.status_code == 200 and "running_timeout" in refused.context["adminform"].errors
