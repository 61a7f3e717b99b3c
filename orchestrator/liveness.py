"""A worker's liveness judged by what it consumes, not by its process.

A worker's process can live on, its connections open, while its consumer takes nothing: on
Redis, an acknowledgement that fails during an outage stays counted against the prefetch limit
and the channel never asks for a message again (docs/operations.md, "A worker that stops
consuming"). Its heartbeats may go on too. So each worker records when it last received a task
message (`WorkerPulse`, at most every PULSE_RECORD_SECONDS while messages flow), and a worker is
*not consuming* when messages wait in its queues while it has received none for longer than the
bound (`WORKER_MAX_WAIT_SECONDS`). `manage.py worker_liveness` (systemd, Kubernetes), `manage.py
launch` and the System page all ask `judge()`.

A worker whose every pool process runs a task takes no message meanwhile, by design (one
message per free process): at each of its heartbeats (every 2 s) it records itself as receiving
then. Without heartbeats (`make run`'s filesystem broker) the bound must exceed the longest task.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import signals
from celery.worker import state
from django.db import DatabaseError, connection
from django.utils import timezone

from orchestrator import workers
from orchestrator.models import WorkerPulse

logger = logging.getLogger(__name__)

# A receipt is written at once after a quiet spell, then at most this often: well under any
# sensible bound, and cheap beside the tasks themselves.
PULSE_RECORD_SECONDS = 5.0
# A suspect is read again after this long: an idle worker receives a message that has just
# arrived within milliseconds, a stuck one never.
CONFIRM_SECONDS = 2.0


class Pulse:
    """The worker side: records the consumer's readiness and its receipts."""

    recorded_at = float("-inf")
    consumer: Any = None

    def ready(self, sender: Any = None, **_: Any) -> None:
        self.consumer = sender
        self.recorded_at = time.monotonic()
        self._write(WorkerPulse.ready, sender)

    def heartbeat(self, **_: Any) -> None:
        """A worker whose every process holds a task is not expected to receive: it counts as
        receiving."""
        processes = getattr(getattr(self.consumer, "pool", None), "num_processes", 0)
        if processes and len(state.reserved_requests) >= processes:
            self.received(sender=self.consumer)

    def received(self, sender: Any = None, **_: Any) -> None:
        now = time.monotonic()
        if now - self.recorded_at >= PULSE_RECORD_SECONDS:
            self.recorded_at = now
            self._write(WorkerPulse.received, sender)

    def gone(self, sender: Any = None, **_: Any) -> None:
        """A warm shutdown: the worker is no longer expected to consume."""
        name = getattr(sender, "hostname", "")
        try:
            WorkerPulse.objects.filter(worker=name).delete()
        except DatabaseError:
            logger.warning("worker %s could not forget its pulse", name, exc_info=True)

    def _write(self, record: Any, sender: Any) -> None:
        name = getattr(sender, "hostname", "")
        if not name:
            return
        try:
            record(name, timezone.now())
        except DatabaseError:
            # The consumer goes on; a broken connection is opened anew at the next write.
            logger.warning("worker %s could not record its pulse", name, exc_info=True)
            connection.close()


pulse = Pulse()
signals.worker_ready.connect(pulse.ready, weak=False)
signals.task_received.connect(pulse.received, weak=False)
signals.worker_shutdown.connect(pulse.gone, weak=False)
signals.heartbeat_sent.connect(pulse.heartbeat, weak=False)


@dataclass(frozen=True)
class Verdict:
    """One worker as judged: `stalled` when messages waited while it received none past the
    bound (it is not consuming since `received_at`)."""

    worker: str
    received_at: datetime
    waiting: int
    stalled: bool

    def describe(self, now: datetime) -> str:
        quiet = (now - self.received_at).total_seconds()
        if self.stalled:
            return (
                f"{self.worker}: NOT CONSUMING since {self.received_at:%Y-%m-%d %H:%M:%S%z} "
                f"({quiet:.0f} s) while {self.waiting} message(s) wait"
            )
        return f"{self.worker}: consuming (last received {quiet:.0f} s ago, {self.waiting} waiting)"


def waiting_messages() -> int | None:
    """Messages waiting in the app's queues; None when the broker did not answer (a worker
    cannot be blamed for an outage: it reconnects by itself)."""
    try:
        with workers.broker_connection() as conn:
            return sum(workers.queue_depths(conn).values())
    except workers.BrokerUnavailable:
        return None


def judge(
    names: list[str] | None,
    max_wait: float,
    host: str | None = None,
    confirm: float = CONFIRM_SECONDS,
) -> list[Verdict] | None:
    """Judge the workers named (or every worker recorded on `host`); None when the broker did
    not answer. Suspects are read again after `confirm` seconds before being called stalled."""
    waiting = waiting_messages()
    if waiting is None:
        return None
    verdicts = judge_pulses(waiting, max_wait, timezone.now(), names, host)
    if confirm and any(v.stalled for v in verdicts):
        time.sleep(confirm)
        waiting = waiting_messages()
        if waiting is None:
            return None
        verdicts = judge_pulses(waiting, max_wait, timezone.now(), names, host)
    return verdicts


def judge_pulses(
    waiting: int,
    max_wait: float,
    now: datetime,
    names: list[str] | None = None,
    host: str | None = None,
) -> list[Verdict]:
    """Judge the recorded workers (those named, or of `host`, or all) against `waiting`
    messages, at once: no second look."""
    pulses = WorkerPulse.objects.order_by("worker")
    if names:
        pulses = pulses.filter(worker__in=names)
    elif host:
        pulses = pulses.on_host(host)
    quiet_since = now - timedelta(seconds=max_wait)
    return [
        Verdict(p.worker, p.received_at, waiting, waiting > 0 and p.received_at < quiet_since)
        for p in pulses
    ]
