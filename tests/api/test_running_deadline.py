"""A finish that comes after the running deadline: the sweeper already failed the run as a
timeout, and the agent's late PATCH is a 409 in the error envelope that says so."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone

from orchestrator.coordination.deadlines import finish_overdue_runs
from orchestrator.models import Run
from tests.api.helpers import assert_envelope
from tests.api.test_agent_loop import auth_error, patch, started


def overdue(client: Client, headers: dict[str, str]) -> int:
    """A run reported running an hour ago, past the default deadline, finished by the sweeper."""
    run_id = started(client, headers)
    Run.objects.filter(pk=run_id).update(created_at=timezone.now() - timedelta(hours=1))
    assert finish_overdue_runs() == 1
    return run_id


def test_a_finish_after_the_deadline_is_a_409_that_says_the_deadline_finished_it(
    client, auth_headers, settings
):
    settings.RUN_RUNNING_TIMEOUT = 900
    run_id = overdue(client, auth_headers)
    stored = client.get(f"/api/v1/runs/{run_id}", **auth_headers).json()
    assert (stored["status"], stored["failure_type"]) == ("failed", "timeout")
    assert stored["exception_type"] == "NoFinishReported"
    assert "no finish reported within 15 min" in stored["detail"]
    late = patch(client, f"/runs/{run_id}", auth_error(), auth_headers)
    body = assert_envelope(late, 409, "invalid_input")
    assert body["retryable"] is False
    assert f"Run {run_id} was finished by the running deadline" in body["detail"]
    assert "as a timeout failure" in body["detail"]
    assert "no finish reported within 15 min" in body["detail"]
    assert body["attempted"]["operation"] == f"PATCH /api/v1/runs/{run_id}"
    assert any("running-timeout" in a for a in body["alternatives"])
    assert any("retry_of" in a for a in body["alternatives"])
    # The run keeps the deadline's outcome: a late finish changes nothing.
    assert client.get(f"/api/v1/runs/{run_id}", **auth_headers).json() == stored


def test_even_a_late_finish_saying_timeout_is_refused(client, auth_headers):
    run_id = overdue(client, auth_headers)
    stored = Run.objects.get(pk=run_id)
    body = {"status": "error", "failure_type": "timeout", "detail": stored.detail}
    refused = assert_envelope(
        patch(client, f"/runs/{run_id}", body, auth_headers), 409, "invalid_input"
    )
    assert "finished by the running deadline" in refused["detail"]


def test_a_finish_before_the_deadline_still_wins(client, auth_headers, settings):
    settings.RUN_RUNNING_TIMEOUT = 900
    run_id = started(client, auth_headers)
    Run.objects.filter(pk=run_id).update(created_at=timezone.now() - timedelta(minutes=14))
    assert finish_overdue_runs() == 0
    assert patch(client, f"/runs/{run_id}", auth_error(), auth_headers).status_code == 200
    assert finish_overdue_runs(timezone.now() + timedelta(hours=1)) == 0
    assert Run.objects.get(pk=run_id).failure_type == "auth_failure"
