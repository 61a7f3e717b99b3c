"""A worker's liveness by what it consumes (orchestrator.liveness): its pulse as the worker's
signals record it, the verdict against the messages waiting, and `manage.py worker_liveness`
against a real broker (kombu's filesystem transport in a folder of the test's)."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from types import SimpleNamespace

import pytest
import time_machine
from celery.worker import state
from django.core.management import call_command
from django.utils import timezone

from orchestrator import liveness
from orchestrator.models import WorkerPulse
from tests.dashboard.test_system import DEAD_BROKER, broker_at, filesystem_broker, send_messages

pytestmark = pytest.mark.django_db

MAX_WAIT = 30


def consumer(name: str) -> SimpleNamespace:
    return SimpleNamespace(hostname=name)


def quiet_for(name: str, seconds: float) -> None:
    at = timezone.now() - timedelta(seconds=seconds)
    WorkerPulse.objects.create(worker=name, ready_at=at, received_at=at)


def test_a_worker_quiet_past_the_bound_while_messages_wait_is_stalled():
    quiet_for("stuck@host", MAX_WAIT + 5)
    (verdict,) = liveness.judge_pulses(3, MAX_WAIT, timezone.now())
    assert verdict.stalled and verdict.waiting == 3
    assert "NOT CONSUMING since" in verdict.describe(timezone.now())


def test_an_idle_worker_with_nothing_waiting_is_not_stalled():
    quiet_for("idle@host", 3600)
    (verdict,) = liveness.judge_pulses(0, MAX_WAIT, timezone.now())
    assert not verdict.stalled


def test_a_worker_that_received_within_the_bound_is_consuming_whatever_waits():
    quiet_for("busy@host", MAX_WAIT - 5)
    (verdict,) = liveness.judge_pulses(500, MAX_WAIT, timezone.now())
    assert not verdict.stalled


def test_workers_are_judged_by_name_or_by_host():
    quiet_for("worker@a", 60)
    quiet_for("worker@b", 60)
    quiet_for("other@a", 60)
    now = timezone.now()
    assert [v.worker for v in liveness.judge_pulses(1, MAX_WAIT, now, host="a")] == [
        "other@a",
        "worker@a",
    ]
    assert [v.worker for v in liveness.judge_pulses(1, MAX_WAIT, now, ["worker@b"])] == ["worker@b"]


def test_the_pulse_is_written_at_readiness_then_at_most_every_few_seconds():
    pulse = liveness.Pulse()
    with time_machine.travel(timezone.now(), tick=False) as clock:
        pulse.ready(sender=consumer("w@host"))
        ready = WorkerPulse.objects.get(worker="w@host")
        assert ready.received_at == ready.ready_at
        clock.shift(1)
        pulse.received(sender=consumer("w@host"))  # too soon after the last write
        assert WorkerPulse.objects.get(worker="w@host").received_at == ready.received_at
    pulse.recorded_at = float("-inf")  # a quiet spell longer than PULSE_RECORD_SECONDS
    pulse.received(sender=consumer("w@host"))
    assert WorkerPulse.objects.get(worker="w@host").received_at > ready.received_at


class Request:
    """Stands for a task request the worker holds (Celery keeps them in a weak set)."""


def test_a_worker_whose_every_process_holds_a_task_counts_as_receiving_at_its_heartbeat():
    worker = SimpleNamespace(hostname="w@host", pool=SimpleNamespace(num_processes=2))
    pulse = liveness.Pulse()
    with time_machine.travel(timezone.now() - timedelta(minutes=5), tick=False):
        pulse.ready(sender=worker)
    before = WorkerPulse.objects.get(worker="w@host").received_at
    held = [Request()]
    state.reserved_requests.update(held)
    try:
        pulse.recorded_at = float("-inf")
        pulse.heartbeat()  # one process of two holds a task: it could receive
        assert WorkerPulse.objects.get(worker="w@host").received_at == before
        held.append(Request())
        state.reserved_requests.update(held)
        pulse.heartbeat()  # both hold one: not expected to receive
        assert WorkerPulse.objects.get(worker="w@host").received_at > before
    finally:
        state.reserved_requests.difference_update(held)


def test_a_warm_shutdown_forgets_the_worker():
    liveness.Pulse().ready(sender=consumer("w@host"))
    liveness.Pulse().gone(sender=consumer("w@host"))
    assert not WorkerPulse.objects.exists()


def liveness_command(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("worker_liveness", *args, stdout=out)
    except SystemExit as exc:
        return int(exc.code), out.getvalue()
    return 0, out.getvalue()


def test_the_command_exits_1_for_a_stalled_worker_and_0_for_one_consuming(tmp_path):
    quiet_for("stuck@host", 120)
    quiet_for("fine@host", 1)
    with filesystem_broker(tmp_path):
        send_messages(2)
        code, out = liveness_command("--worker", "fine@host", "--max-wait", "60")
        assert code == 0 and "fine@host: consuming" in out
        code, out = liveness_command("--worker", "stuck@host", "--max-wait", "60")
    assert code == 1
    assert "stuck@host: NOT CONSUMING since" in out and "while 2 message(s) wait" in out


def test_the_command_does_not_blame_a_worker_for_a_broker_that_does_not_answer():
    quiet_for("stuck@host", 120)
    with broker_at(DEAD_BROKER):
        code, out = liveness_command("--worker", "stuck@host", "--max-wait", "60")
    assert code == 0 and "not judged: the broker did not answer" in out
