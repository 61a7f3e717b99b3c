"""Step 5 of the ingest pipeline: what newly stored reports say about their sources (a call
started inside a source's Retry-After hold is early; every success and failure feeds the source's
breaker, budget and hold, as the built-in coordinator's calls do), applied off the request path by
a per-process flusher (`feed`), or at once inside a caller's transaction."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from contextlib import nullcontext
from datetime import datetime, timedelta

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from orchestrator.coordination import budget
from orchestrator.ingest.feed import Feed
from orchestrator.models import Run
from orchestrator.schemas import EnvelopeIn

logger = logging.getLogger(__name__)


def tell_sources(runs: Sequence[tuple[EnvelopeIn, int]], now: datetime | None = None) -> None:
    """Step 5: feed what newly stored reports (with their run ids) say about their sources: a call
    started inside a source's Retry-After hold is early, whatever its query; every success and
    failure feeds the source's breaker, budget and hold, as the built-in coordinator's calls do.
    Off the request path (`feed`), unless inside the caller's transaction. The reports stand
    whatever happens there: an error is logged, never answered."""
    now = now or timezone.now()
    answers = [answer for run, _ in runs if (answer := _answer(run, now)) is not None]
    if not runs:
        return
    if connection.in_atomic_block:
        _feed([(runs, answers)])
    else:
        FEED.submit([(runs, answers)])


def _feed(batches: Sequence[tuple[Sequence[tuple[EnvelopeIn, int]], list[budget.Answer]]]) -> None:
    """Apply reports' feeds, as many as have gathered, with one read and one UPDATE a source."""
    runs = [pair for batch_runs, _ in batches for pair in batch_runs]
    answers = [answer for _, batch_answers in batches for answer in batch_answers]
    now = timezone.now()
    try:
        with transaction.atomic() if connection.in_atomic_block else nullcontext():
            known = _mark_early(runs, answers)
            closed = budget.record(answers, now, known)
        _wake(closed, now)
    except DatabaseError:
        logger.warning("reports stored, but not fed to their sources' health", exc_info=True)


FEED = Feed(_feed)


def settle() -> None:
    """Apply this process's reports still waiting for their sources' health, here and now."""
    FEED.flush()


def _wake(sources: Iterable[str], now: datetime) -> None:
    """Sources whose open or half-open breaker an agent's report has just closed: the built-in
    coordinator's runs it held back start now, not at their next look."""
    for source in sorted(sources):
        budget.wake_deferred(source, now)


def tell_finish(run: Run) -> None:
    """`tell_sources` for an agent's run just finished (PATCH /runs/{id})."""
    now = timezone.now()
    at = min(run.finished_at, now) if run.finished_at else now
    answer = budget.Answer(
        run.source, not run.is_failure, at, run.failure_type, run.retry_after, run.attempt > 1
    )
    try:
        _wake(budget.record([answer], now), now)
    except DatabaseError:
        logger.warning("run %s finished, but not fed to its source's health", run.pk, exc_info=True)


def _answer(run: EnvelopeIn, now: datetime) -> budget.Answer | None:
    if run.status not in ("ok", "error") or not run.source:
        return None  # a running run has no answer yet
    at = min(run.finished_at, now) if run.finished_at else now
    ftype = run.failure_type.value if run.failure_type else None
    retry = run.attempt > 1  # a later attempt of a request: its failure extends no streak
    return budget.Answer(run.source, run.status == "ok", at, ftype, run.retry_after, retry)


def _call_start(run: EnvelopeIn) -> datetime | None:
    started = getattr(run, "started_at", None)
    if started is None and run.finished_at and run.duration_ms is not None:
        started = run.finished_at - timedelta(milliseconds=run.duration_ms)
    return started


def _mark_early(
    runs: Sequence[tuple[EnvelopeIn, int]], answers: Sequence[budget.Answer]
) -> set[str]:
    """Give each run whose call started inside a hold (stored, or begun by an earlier answer of
    these very reports) the hold's end as `due_at`: it started before it was due, an early call.
    Return the sources read that have a health row."""
    starts = {pk: (run.source, s) for run, pk in runs if run.source and (s := _call_start(run))}
    if not starts:
        return set()
    since = min(start for _, start in starts.values())
    holds = budget.Holds.current({run.source for run, _ in runs if run.source}, since)
    for answer in answers:
        if answer.hold is not None:
            holds.add(answer.source, *answer.hold)
    if not holds:
        return holds.known
    due: dict[datetime, list[int]] = {}
    for pk, (source, start) in starts.items():
        if (until := holds.covering(source, start)) is not None:
            due.setdefault(until, []).append(pk)
    for until, pks in due.items():  # `RunSets.EARLY_RETRIES`: started before it was due
        Run.objects.filter(pk__in=pks).update(due_at=until)
    return holds.known
