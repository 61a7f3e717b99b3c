"""Running one subagent attempt: admission, the source call with local recovery, the envelope.

`execute_run` is the body of the `run_subagent` task: it takes a claimed run, asks the source's
budget and breaker whether a call may go now, calls the source through `call_with_recovery` (a
couple of quick local retries for a blip, never a long wait in a worker; a provider's Retry-After is
shared by every caller of that source), and records the envelope on the run. Deciding what happens
after a failure is `workflow`'s job, not this module's; sending tasks is `dispatch`'s.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from classifier import Failure
from classifier.envelope import failure_envelope, success_envelope
from orchestrator.coordination import budget, clock, dispatch, policy
from orchestrator.coordination.clock import Clock
from orchestrator.coordination.registry import Source, registry
from orchestrator.models import Run
from orchestrator.vocabulary import FailureCategory

# A task started this many times without finishing kills its worker: park it for a human.
MAX_DELIVERIES = 3
# Local recovery: a couple of quick retries for blips, never a long wait in a worker (the README's
# "Recover locally, propagate the rest").
LOCAL_RETRIES = 2
LOCAL_MAX_WAIT = 1.0
LOCAL_TYPES = frozenset({FailureCategory.TRANSIENT, FailureCategory.TIMEOUT})
# Keys the coordinator adds to a query for the source's benefit; not part of "what was attempted".
INTERNAL_KEYS = ("attempt", "faults", "workflow")


def execute_run(run_id: int, *, run_clock: Clock | None = None) -> str:
    """Run a claimed run once; a redelivery of a finished run does nothing. Return what happened."""
    run_clock = run_clock or clock.current
    run = Run.objects.filter(pk=run_id).select_related("workflow").first()
    if run is None or run.status != Run.Status.RUNNING:
        return "skipped"
    now = run_clock.now()
    wait = budget.admit(run.source, now)
    if wait is not None:
        # The provider asked us to wait, or its breaker is open: back to the queue, no call.
        run.transition(Run.Status.RUNNING, Run.Status.QUEUED, due_at=wait)
        return "deferred"
    if not run.start(now):
        return "skipped"
    if run.deliveries > MAX_DELIVERIES:
        _park(run, run_clock.now())
        return "parked"
    envelope, calls = _call_source(run, run_clock)
    finished = run_clock.now()
    if run.record_outcome(envelope, finished, calls):
        _record_health(run.source, envelope, finished)
    dispatch.after_commit_step(run.workflow_id)
    return run.status


def _park(run: Run, now: datetime) -> None:
    detail = (
        f"Parked after {run.deliveries - 1} deliveries: the worker died every time it ran this "
        "task (a poison task), so it is not run again."
    )
    envelope = {
        "status": "error",
        "failure_type": FailureCategory.UNCLASSIFIED,
        "detail": detail,
        "retryable": False,
    }
    run.record_outcome(envelope, now, run.calls)
    dispatch.after_commit_step(run.workflow_id)


def _call_source(run: Run, run_clock: Clock) -> tuple[dict[str, Any], int]:
    reg = registry()
    source = reg.get(run.source)
    if source is None:
        detail = f"No source named {run.source!r} is registered in this worker."
        envelope = {"status": "error", "failure_type": FailureCategory.UNCLASSIFIED}
        return envelope | {"detail": detail}, 0
    if source.refresher and run.previous_failure_type() == FailureCategory.AUTH_FAILURE:
        source.refresher()
    wf = run.workflow
    query = run.attempted | {"attempt": run.attempt, "faults": (wf.input or {}).get("faults", {})}
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


# ---------------------------------------------------------------------------------------------
# Calling a source with local recovery


@dataclass
class Outcome:
    """What one run of a subagent produced: its envelope and how many calls it took."""

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

    No call happens before `not_before()` (a provider's Retry-After, shared by every caller of the
    source and read again before each call); a Retry-After received here is passed to `hold`.
    """
    partial: list[dict] = []
    calls = 0
    waited_for: datetime | None = None
    while True:
        _wait_until(clock, _latest(not_before(), waited_for))
        calls += 1
        try:
            results = source(query, partial)
        except Exception as exc:  # a source may raise anything: classify it, never crash
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
    """The envelope of the failure as we classified it (with the provider's overrides)."""
    return failure_envelope(
        failure,
        attempted=attempted_of(query) | {"source": source},
        partial_results=_unique(partial),
        alternatives=[f"use {name} instead of {source}" for name in alternatives or []],
    )


def _unique(items: list[dict]) -> list[dict]:
    """Drop the duplicates a local retry gathers again, keeping the first order."""
    seen: set[str] = set()
    out = []
    for item in items:
        key = json.dumps(item, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out
