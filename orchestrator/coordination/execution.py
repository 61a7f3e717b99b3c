"""Running one subagent attempt: the lease, admission, the source call with local recovery, the
envelope. The outcome is fenced by its delivery number: a delivery that lost the run to another
records nothing."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.db.models import Q

from classifier import Failure
from classifier.envelope import failure_envelope, success_envelope
from orchestrator.coordination import budget, clock, dispatch, policy
from orchestrator.coordination.clock import Clock, SystemClock
from orchestrator.coordination.registry import Source, registry
from orchestrator.models import Run
from orchestrator.vocabulary import FailureCategory

logger = logging.getLogger(__name__)

# A couple of quick retries for blips, never a long wait in a worker.
LOCAL_RETRIES = 2
LOCAL_MAX_WAIT = 1.0
LOCAL_TYPES = frozenset({FailureCategory.TRANSIENT, FailureCategory.TIMEOUT})
# Added to a query for the source's benefit; not part of "what was attempted".
INTERNAL_KEYS = ("attempt", "faults", "workflow", "run", "delivery")
# The call was paid for: a database error while recording it is retried this long.
RECORD_PATIENCE = 30.0
# What Celery raises when a worker process dies mid-task.
WORKER_LOST = "WorkerLostError"


def lease_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def holder_is_dead(owner: str) -> bool:
    """Return whether `owner` names a process of this host that no longer runs (any doubt:
    False), so that a killed child's redelivered task need not wait for its lease to run out."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    return False


def lease_period() -> timedelta:
    return timedelta(seconds=settings.RUN_LEASE_SECONDS)


def execute_run(run_id: int, *, run_clock: Clock | None = None) -> str:
    """Run a claimed run once; a redelivery of a finished or held run does nothing."""
    run_clock = run_clock or clock.current
    run = Run.objects.filter(pk=run_id).select_related("workflow").first()
    if run is None or run.status != Run.Status.RUNNING:
        return "skipped"
    now = run_clock.now()
    owner = lease_owner()
    held = run.lease_until is not None and run.lease_until >= now and run.lease_owner != owner
    dead = run.lease_owner if held and holder_is_dead(run.lease_owner) else ""
    if held and not dead:
        return "skipped"
    wait = budget.admit(run.source, now)
    if wait is not None:
        return "deferred" if _defer(run, wait, now, owner, dead) else "skipped"
    delivery = run.start(now, owner, now + lease_period(), take_from=dead)
    if delivery is None:
        return "skipped"
    if delivery > settings.RUN_MAX_DELIVERIES:
        _park(run, delivery, run_clock.now())
        return "parked"
    with heartbeat(run, delivery, owner, run_clock):
        envelope, calls = _call_source(run, delivery, run_clock)
    _record(run, delivery, envelope, calls, run_clock)
    return run.status


def _defer(run: Run, until: datetime, now: datetime, owner: str, dead: str) -> bool:
    free = Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(lease_owner=owner)
    if dead:
        free |= Q(lease_owner=dead)
    changed = (
        Run.objects.filter(pk=run.pk, status=Run.Status.RUNNING)
        .filter(free)
        .update(status=Run.Status.QUEUED, due_at=until, lease_until=None, lease_owner="")
    )
    return bool(changed)


def _record(
    run: Run, delivery: int, envelope: dict[str, Any], calls: int, run_clock: Clock
) -> None:
    deadline = time.monotonic() + RECORD_PATIENCE
    pause = 0.5
    while True:
        try:
            with transaction.atomic():
                finished = run_clock.now()
                if run.record_outcome(envelope, finished, calls, delivery=delivery):
                    _record_health(run.source, envelope, finished)
                    dispatch.step(run.workflow_id)
            return
        except DatabaseError:
            if time.monotonic() + pause > deadline:
                raise
            logger.warning("run %s: database error while recording; retrying", run.pk)
            connections["default"].close()
            time.sleep(pause)
            pause = min(pause * 2, 5.0)


@contextlib.contextmanager
def heartbeat(run: Run, delivery: int, owner: str, run_clock: Clock) -> Iterator[None]:
    """Renew the run's lease every third of its period while the block runs (real time only)."""
    if not isinstance(run_clock, SystemClock):
        yield
        return
    stop = threading.Event()
    period = lease_period()

    def beat() -> None:
        try:
            while not stop.wait(period.total_seconds() / 3):
                try:
                    if not run.renew_lease(delivery, owner, run_clock.now() + period):
                        return
                except DatabaseError:
                    logger.warning("run %s: lease not renewed (database error)", run.pk)
                    connections["default"].close()
        finally:
            connections["default"].close()

    thread = threading.Thread(target=beat, name=f"lease-{run.pk}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _park(run: Run, delivery: int, now: datetime) -> None:
    deaths = delivery - 1
    detail = (
        f"Parked: its worker died {deaths} times while running this task (a poison task, or a "
        "worker that keeps being killed), so it is not run again."
    )
    envelope = {
        "status": "error",
        "failure_type": FailureCategory.UNCLASSIFIED,
        "detail": detail,
        "exception_type": WORKER_LOST,
        "retryable": False,
    }
    with transaction.atomic():
        if run.record_outcome(envelope, now, run.calls, delivery=delivery):
            dispatch.step(run.workflow_id)


def _call_source(run: Run, delivery: int, run_clock: Clock) -> tuple[dict[str, Any], int]:
    reg = registry()
    source = reg.get(run.source)
    if source is None:
        detail = f"No source named {run.source!r} is registered in this worker."
        envelope = {"status": "error", "failure_type": FailureCategory.UNCLASSIFIED}
        return envelope | {"detail": detail}, 0
    if source.refresher and run.previous_failure_type() == FailureCategory.AUTH_FAILURE:
        source.refresher()
    wf = run.workflow
    faults = (wf.input or {}).get("faults", {})
    query = run.attempted | {
        "attempt": run.attempt,
        "faults": faults,
        "run": run.pk,
        "delivery": delivery,
    }
    others = [s for s in reg.sources_for(run.capability) if s != run.source]
    classifier = policy.current_classifier()
    outcome = call_with_recovery(
        source,
        query,
        classify=lambda exc: classifier.classify(exc, provider=run.source),
        clock=run_clock,
        not_before=lambda: budget.health(run.source).not_before,
        hold=lambda until: budget.hold(run.source, until),
        alternatives=others,
    )
    return outcome.envelope, outcome.calls


def _record_health(source: str, envelope: dict[str, Any], now: datetime) -> None:
    if envelope.get("status") == "ok":
        budget.record_success(source)
    else:
        ftype = envelope.get("failure_type") or FailureCategory.UNCLASSIFIED
        budget.record_failure(source, ftype, now, envelope.get("retry_after"))


@dataclass
class Outcome:
    envelope: dict[str, Any]
    calls: int
    failure: Failure | None = None


def attempted_of(query: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in query.items() if k not in INTERNAL_KEYS}


def call_with_recovery(
    source: Source,
    query: dict[str, Any],
    *,
    classify: Callable[[BaseException], Failure],
    clock: Clock,
    not_before: Callable[[], datetime | None] = lambda: None,
    hold: Callable[[datetime], None] = lambda until: None,
    alternatives: list[str] | None = None,
    rng: Callable[[], float] = random.random,
) -> Outcome:
    """Call `source`, retrying a brief blip locally; return the envelope with every partial result.

    No call happens before `not_before()`, a Retry-After shared by every caller of the source.
    """
    partial: list[dict] = []
    calls = 0
    waited_for: datetime | None = None
    while True:
        _wait_until(clock, _latest(not_before(), waited_for))
        calls += 1
        try:
            results = source(query, partial)
        except Exception as exc:
            failure = classify(exc)
            if failure.retry_after is not None:
                waited_for = clock.now() + timedelta(seconds=failure.retry_after)
                hold(waited_for)
            if calls <= LOCAL_RETRIES and _recover_locally(failure):
                clock.sleep(min(LOCAL_MAX_WAIT, 0.25 * 2 ** (calls - 1)) * rng())
                continue
            envelope = _error_envelope(failure, query, partial, source.name, alternatives)
            return Outcome(envelope=envelope, calls=calls, failure=failure)
        return Outcome(
            envelope=success_envelope(results, attempted=attempted_of(query)), calls=calls
        )


def _recover_locally(failure: Failure) -> bool:
    if failure.category in LOCAL_TYPES:
        return True
    short = failure.retry_after is not None and failure.retry_after <= LOCAL_MAX_WAIT
    return failure.category == FailureCategory.RATE_LIMITED and short


def _latest(*moments: datetime | None) -> datetime | None:
    return max((m for m in moments if m is not None), default=None)


def _wait_until(clock: Clock, moment: datetime | None) -> None:
    if moment is not None:
        clock.sleep((moment - clock.now()).total_seconds())


def _error_envelope(
    failure: Failure,
    query: dict[str, Any],
    partial: list[dict],
    source: str,
    alternatives: list[str] | None,
) -> dict[str, Any]:
    return failure_envelope(
        failure,
        attempted=attempted_of(query) | {"source": source},
        partial_results=_unique(partial),
        alternatives=[f"use {name} instead of {source}" for name in alternatives or []],
    )


def _unique(items: list[dict]) -> list[dict]:
    seen: set[str] = set()
    out = []
    for item in items:
        key = json.dumps(item, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out
