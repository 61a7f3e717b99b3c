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
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connections, transaction
from django.db.models import Q

from classifier import Failure
from classifier.envelope import failure_envelope, success_envelope
from orchestrator import pricing
from orchestrator.coordination import budget, clock, dispatch, policy, routing, workflow
from orchestrator.coordination.clock import Clock, SystemClock
from orchestrator.coordination.registry import Source, registry
from orchestrator.models import Run
from orchestrator.vocabulary import Action, FailureCategory

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
    admitted = budget.admission(run.source, now)
    if admitted.wait is not None:
        return "deferred" if _defer(run, admitted.wait, now, owner, dead) else "skipped"
    delivery = run.start(now, owner, now + lease_period(), take_from=dead)
    if delivery is None:
        return "skipped"
    if delivery > settings.RUN_MAX_DELIVERIES:
        _park(run, delivery, run_clock.now())
        return "parked"
    with heartbeat(run, delivery, owner, run_clock):
        envelope, calls = _call_source(run, delivery, run_clock)
    closed = _record(run, delivery, envelope, calls, run_clock)
    if admitted.probe or closed:
        # A probe's answer, or a call sent before the breaker opened that found the source up.
        budget.wake_deferred(run.source, run_clock.now())
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
) -> bool:
    """Store the outcome and feed the source's health; whether it closed the source's breaker."""
    deadline = time.monotonic() + RECORD_PATIENCE
    pause = 0.5
    while True:
        try:
            closed = False
            with transaction.atomic():
                finished = run_clock.now()
                usage = pricing.usage_fields(run, envelope.get("usage"), calls, finished)
                if run.record_outcome(envelope, finished, calls, delivery, usage):
                    closed = _record_health(run.source, envelope, finished, retry=run.attempt > 1)
                    dispatch.step(run.workflow_id)
            return closed
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
        usage = pricing.usage_fields(run, None, run.calls, now)
        if run.record_outcome(envelope, now, run.calls, delivery, usage):
            dispatch.step(run.workflow_id)


def _call_source(run: Run, delivery: int, run_clock: Clock) -> tuple[dict[str, Any], int]:
    reg = registry()
    source = reg.get(run.source)
    if source is None:
        detail = f"No source named {run.source!r} is registered in this worker."
        envelope = {"status": "error", "failure_type": FailureCategory.UNCLASSIFIED}
        return envelope | {"detail": detail}, 0
    if source.refresher and run.previous_failure_type() == FailureCategory.AUTH_FAILURE:
        try:
            source.refresher()
        except Exception as exc:  # a refresh that fails is this attempt's auth failure
            logger.warning("run %s: refreshing the credentials of %s failed", run.pk, run.source)
            detail = f"Refreshing the credentials of {run.source} failed: {exc!r}"
            envelope = {"status": "error", "failure_type": FailureCategory.AUTH_FAILURE}
            return envelope | {"detail": detail[:2000], "retryable": False}, 0
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
        gate=SourceGate(run.source, run.attempt, workflow.route_context(wf, run)),
        alternatives=others,
    )
    return outcome.envelope, outcome.calls


def _record_health(source: str, envelope: dict[str, Any], now: datetime, retry: bool) -> bool:
    """Feed the call's answer to its source; whether it closed the source's breaker."""
    if envelope.get("status") == "ok":
        answer = budget.Answer(source, True, now)
    else:
        ftype = envelope.get("failure_type") or FailureCategory.UNCLASSIFIED
        answer = budget.Answer(source, False, now, ftype, envelope.get("retry_after"), retry)
    return source in budget.record([answer], now)


@dataclass
class SourceGate:
    """What local recovery shares with every caller of a source: its Retry-After hold, its
    breaker and budget, and the routing decision the coordinator takes for attempt `attempt`."""

    source: str
    attempt: int
    context: routing.Context

    def not_before(self) -> datetime | None:
        return budget.health(self.source).not_before

    def retries_here(self, at: datetime) -> bool:
        """Whether a quick retry may go at `at` from here: only while the source's breaker is
        closed and no hold runs past it. Otherwise the run hands its failure to the coordinator,
        whose retry is admitted as every call is (an open breaker's cool-down, a half-open one's
        probes, whoever counts them)."""
        health = budget.health(self.source)
        held = health.not_before is not None and health.not_before > at
        return health.breaker_state == budget.Breaker.CLOSED and not held

    def failed(self, failure: Failure, now: datetime, partial: int) -> routing.Decision:
        """Hold every caller back at once if the source said so, then decide about the failed
        call as the coordinator will once the run records it (nothing paid yet)."""
        if failure.retry_after:
            budget.record([budget.Answer(self.source, False, now, None, failure.retry_after)], now)
        ftype, retry = failure.category, self.attempt > 1
        answer = budget.Answer(self.source, False, now, ftype, failure.retry_after, retry)
        context = replace(self.context, partial_count=partial)
        return budget.decide(failure, self.attempt, context, now=now, pay=False, unrecorded=answer)

    def pay(self, decision: routing.Decision) -> bool:
        return budget.try_spend(self.source, decision.budget_cost)


@dataclass
class Outcome:
    envelope: dict[str, Any]
    calls: int
    failure: Failure | None = None
    decisions: list[routing.Decision] = field(default_factory=list)  # one per failed call


def attempted_of(query: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in query.items() if k not in INTERNAL_KEYS}


def call_with_recovery(
    source: Source,
    query: dict[str, Any],
    *,
    classify: Callable[[BaseException], Failure],
    clock: Clock,
    gate: SourceGate,
    alternatives: list[str] | None = None,
    rng: Callable[[], float] = random.random,
) -> Outcome:
    """Call `source`, retrying a brief blip locally when routing retries it; return the envelope
    with every partial result.

    No call happens before `gate.not_before()`, a Retry-After shared by every caller of the
    source; a failed call's Retry-After holds them back at once, and its run's outcome, recorded
    once, feeds the breaker.
    """
    partial: list[dict] = []
    calls = 0
    decisions: list[routing.Decision] = []
    while True:
        _wait_until(clock, gate.not_before())
        calls += 1
        try:
            results = source(query, partial)
        except Exception as exc:
            failure = classify(exc)
            decisions.append(gate.failed(failure, clock.now(), len(_unique(partial))))
            pause = _local_pause(failure, decisions[-1], calls, rng)
            if (
                pause is not None
                and gate.retries_here(clock.now() + timedelta(seconds=pause))
                and gate.pay(decisions[-1])
            ):
                clock.sleep(pause)
                continue
            envelope = _error_envelope(failure, query, partial, source.name, alternatives)
            return Outcome(envelope, calls, failure, decisions)
        envelope = success_envelope(results, attempted=attempted_of(query))
        return Outcome(envelope, calls, decisions=decisions)


def _local_pause(
    failure: Failure, decision: routing.Decision, calls: int, rng: Callable[[], float]
) -> float | None:
    """Return the pause before retrying here, or None to hand the failure to the coordinator:
    only a retry (or wait) routing chose, of a brief blip, that may go within LOCAL_MAX_WAIT."""
    if calls > LOCAL_RETRIES or not decision.calls_again or decision.refresh:
        return None
    limited = failure.category == FailureCategory.RATE_LIMITED and failure.retry_after is not None
    if failure.category not in LOCAL_TYPES and not limited:
        return None
    floor = decision.delay_seconds if decision.action == Action.WAIT else failure.retry_after or 0.0
    if floor > LOCAL_MAX_WAIT:
        return None
    return max(floor, min(LOCAL_MAX_WAIT, 0.25 * 2 ** (calls - 1)) * rng())


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
