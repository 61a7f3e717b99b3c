"""Recording reported runs: per-item validation, idempotency keys, outcomes, group commit.

A batch costs a fixed number of queries whatever its size. Concurrent repeats of a key produce one
row because a unique index arbitrates, never a read-then-write (on PostgreSQL the claims table,
see `Run`). No counter is updated on the request path: periodic jobs fold them in. What the
stored reports say about their sources (breaker, budget, Retry-After hold, calls started inside a
hold) is written after them: a read and one UPDATE for all their sources.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any

import orjson
import pydantic
from django.conf import settings
from django.db import DatabaseError, DataError, IntegrityError, connection, transaction
from django.utils import timezone

from classifier import FailureCategory
from orchestrator import scrubbing
from orchestrator.api import scopes
from orchestrator.api.costs import columns as cost_columns
from orchestrator.api.errors import ApiError, FieldError, invalid
from orchestrator.api.groupcommit import GroupCommit
from orchestrator.api.inserts import ROW_FIELDS, Stored, insert_rows, stored_keys
from orchestrator.api.reclassify import reclassify
from orchestrator.api.schemas import EnvelopeIn, RunIn
from orchestrator.coordination import budget
from orchestrator.fingerprint import signature
from orchestrator.memo import LocalMemo
from orchestrator.models import ApiToken, Run, Workflow
from orchestrator.models.tokens import project_of

logger = logging.getLogger(__name__)

# A report's envelope status as the run's status ("running": started, finished by a PATCH).
REPORTED_STATUS = {
    "ok": Run.Status.SUCCEEDED.value,
    "error": Run.Status.FAILED.value,
    "running": Run.Status.RUNNING.value,
}
# What a `running` report cannot carry yet: its outcome.
OUTCOME_FIELDS = (
    "failure_type",
    "retryable",
    "retry_after",
    "partial_results",
    "detail",
    "results",
    "finished_at",
    "duration_ms",
    "status_code",
    "provider_code",
    "exception_type",
    "signal",
    "chain",
)


@dataclass(slots=True)
class Pending:
    """A valid item on its way into the table."""

    index: int
    run: RunIn
    token_id: int
    key: str
    digest: str
    row: tuple = ()


@dataclass(slots=True)
class Outcome:
    """What happened to one item: created, existing (an identical earlier report), rejected."""

    index: int
    status: str
    id: int | None = None
    error: ApiError | None = None
    created_at: datetime | None = None  # of an existing run, when known

    def as_dict(self) -> dict[str, Any]:
        error = None
        if self.error is not None:
            error = {
                "failure_type": self.error.failure_type.value,
                "detail": self.error.detail,
                "errors": [e.as_dict() for e in self.error.errors],
            }
        return {"index": self.index, "status": self.status, "id": self.id, "error": error}


def _path(prefix: str, loc: Iterable[Any]) -> str:
    return ".".join(str(part) for part in (prefix, *loc) if part != "")


def named(run: RunIn, token_id: int) -> RunIn:
    """`run` with the agent and source a verbatim envelope leaves out (`RunIn.with_defaults`)."""
    if run.agent is not None and run.source is not None:
        return run
    names = ApiToken.objects.filter(pk=token_id).values_list("name", flat=True)
    return run.with_defaults(_TOKEN_NAMES.get(token_id, names.first) or "")


# Token names by id, for reports that name no agent; a rename shows within a minute.
_TOKEN_NAMES: LocalMemo[str | None] = LocalMemo(lambda: 60.0)


def validate_item(raw: Any, prefix: str) -> tuple[RunIn | None, list[FieldError]]:
    try:
        run = RunIn.model_validate(raw)
    except pydantic.ValidationError as exc:
        return None, [FieldError(_path(prefix, e["loc"]), e["msg"]) for e in exc.errors()]
    errors = consistency_errors(run, prefix)
    if errors:
        return None, errors
    run.scrub(scrubbing.current())  # before anything is stored
    return run, errors


def consistency_errors(run: EnvelopeIn, prefix: str = "") -> list[FieldError]:
    """Return what contradicts the envelope's rules: one status, its own fields."""
    errors = []

    def refuse(field: str, message: str) -> None:
        errors.append(FieldError(_path(prefix, [field]), message))

    if run.status == "running":
        for name in OUTCOME_FIELDS:
            if getattr(run, name) not in (None, "", []):
                refuse(name, "a running run has no outcome yet: send it with PATCH /runs/{id}")
    elif run.status == "ok":
        if run.failure_type is not None:
            refuse("failure_type", "must be null when status is ok (an empty result is a success)")
        if run.partial_results:
            refuse("partial_results", "only for status error; a success reports results")
    else:
        if run.failure_type is None:
            refuse("failure_type", "is required when status is error")
        if run.results:
            refuse("results", "a failure reports what it gathered in partial_results")
    started = getattr(run, "started_at", None)  # a finish (RunFinishIn) has no start
    if started and run.finished_at and run.finished_at < started:
        refuse("finished_at", "is before started_at")
    if getattr(run, "span_id", "") and not run.trace_id:
        refuse("span_id", "names a span of no trace: send trace_id too")
    return errors


def reference_errors(pending: Sequence[Pending], prefix: Callable[[int], str]) -> dict[int, list]:
    """Return {index: errors} for items whose references the database would refuse, so that one
    such item is rejected alone instead of failing the batch's single INSERT."""
    errors: dict[int, list[FieldError]] = {}

    def refuse(p: Pending, field: str, message: str) -> None:
        errors.setdefault(p.index, []).append(FieldError(_path(prefix(p.index), [field]), message))

    reporters = scopes.Reporters(p.token_id for p in pending)
    workflows = {p.run.workflow for p in pending} - {None}
    if workflows:
        # Another token's workflow takes act:all: without it, it is unknown (scopes).
        known = Workflow.objects.only("token", "project").in_bulk(workflows)
        for p in pending:
            if p.run.workflow is None:
                continue
            wf = known.get(p.run.workflow)
            if wf is None or not reporters.may_act(p.token_id, wf):
                refuse(p, "workflow", f"no workflow with id {p.run.workflow}")
    retries = [p for p in pending if p.run.retry_of is not None]
    if retries:
        for p, field, message in _retry_conflicts(retries, reporters):
            refuse(p, field, message)
    return errors


def _retry_conflicts(
    retries: Sequence[Pending], reporters: scopes.Reporters
) -> Iterable[tuple[Pending, str, str]]:
    """Yield (item, field, reason) for retries of unknown runs (another token's run is unknown
    without act:all) or of attempts already taken."""
    firsts = {p.run.retry_of for p in retries}
    known = (
        Run.objects.filter(pk__in=firsts)
        .select_related("workflow")
        .only("token", "project", "workflow__token")
        .in_bulk()
    )
    taken = {
        (first, attempt): (pk, token_id, key)
        for first, attempt, pk, token_id, key in Run.objects.filter(
            retry_of__in=firsts
        ).values_list("retry_of", "attempt", "pk", "token_id", "idempotency_key")
    }
    claimed: dict[tuple[int, int], str] = {}
    for p in retries:
        slot = (p.run.retry_of, p.run.attempt)
        first = known.get(p.run.retry_of)
        if first is None or not reporters.may_act(p.token_id, first):
            yield p, "retry_of", f"no run with id {p.run.retry_of}"
        elif slot in taken and not (p.key and taken[slot][1:] == (p.token_id, p.key)):
            yield (
                p,
                "attempt",
                f"attempt {slot[1]} of run {slot[0]} is already run {taken[slot][0]}",
            )
        elif slot in claimed and (not p.key or claimed[slot] != p.key):
            yield p, "attempt", f"attempt {slot[1]} of run {slot[0]} appears twice in the batch"
        else:
            claimed[slot] = p.key


def request_hash(raw: dict[str, Any]) -> str:
    """Hash of the reported JSON data (key order and whitespace do not matter), the idempotency
    key left out, so a key reused for another body is detected."""
    data = {name: value for name, value in raw.items() if name != "idempotency_key"}
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _duration_ms(run: RunIn) -> float | None:
    if run.duration_ms is not None or not (run.started_at and run.finished_at):
        return run.duration_ms
    return (run.finished_at - run.started_at).total_seconds() * 1000


def _operation(run: RunIn) -> str:
    if run.operation:
        return run.operation
    named = run.attempted.get("operation")
    return named[:200] if isinstance(named, str) else ""


def _row(p: Pending) -> tuple:
    run = p.run
    return (
        run.workflow,
        run.topic,
        run.capability,
        run.agent,
        run.source,
        _operation(run),
        run.attempted,
        run.attempt,
        run.retry_of,
        REPORTED_STATUS[run.status],
        len(run.results),
        run.results,
        run.failure_type.value if run.failure_type else None,
        run.reported_failure_type,
        run.classified_policy_version,
        run.retryable,
        run.retry_after,
        run.status_code,
        run.provider_code or "",
        run.exception_type,
        run.signal.value if run.signal else "",
        run.detail,
        run.chain,
        run.partial_results,
        len(run.partial_results),
        run.alternatives,
        signature(run.source, run.failure_type.value, run.detail) if run.failure_type else "",
        run.started_at,
        run.finished_at,
        _duration_ms(run),
        p.key,
        p.digest,
        run.trace_id,
        run.span_id,
        run.scrubbed_fields,
        *cost_columns(run.usage, run.cost, run.source, run.started_at or timezone.now()),
    )


def run_fields(run: RunIn) -> dict[str, Any]:
    """The columns a report sets, by attribute name: a later report of the same run updates them."""
    return dict(zip(_row_attnames(), _row(Pending(0, run, 0, "", "")), strict=True))


def key_reused(key: str, stored_id: int, path: str, noun: str = "run") -> ApiError:
    return ApiError(
        409,
        FailureCategory.INVALID_INPUT,
        f"Idempotency key {key!r} was already used for a different {noun} (id {stored_id}).",
        errors=[FieldError(path, "already used for a different body")],
        alternatives=[
            f"use a new idempotency key for a new {noun}",
            f"repeat the original body unchanged to get the stored {noun}",
        ],
    )


def store(
    token_id: int,
    pending: Sequence[Pending],
    key_path: Callable[[int], str],
    created_at: datetime | None = None,
) -> list[Outcome]:
    first: dict[str, Pending] = {}
    to_insert: list[Pending] = []
    repeats: list[Pending] = []
    for p in pending:
        if p.key and p.key in first:
            repeats.append(p)  # the same key twice in one batch: judged against the stored row
            continue
        first[p.key] = p
        to_insert.append(p)
    # Inserting in key order makes concurrent batches take index locks in the same order, so two
    # batches sharing keys wait for each other instead of deadlocking.
    to_insert.sort(key=lambda p: p.key)
    for p in to_insert:
        p.row = _row(p)
    inserted = insert_rows(token_id, [p.row for p in to_insert], created_at)

    stored = {key: Stored(pk, first[key].digest, created_at) for pk, key in inserted if key}
    keyless = iter(pk for pk, key in inserted if not key)
    outcomes = {p.index: Outcome(p.index, "created", next(keyless)) for p in to_insert if not p.key}
    outcomes |= {
        p.index: Outcome(p.index, "created", stored[p.key].id) for p in to_insert if p.key in stored
    }
    earlier = [p for p in (*to_insert, *repeats) if p.key and p.index not in outcomes]
    stored |= stored_keys(token_id, (p.key for p in earlier if p.key not in stored))
    for p in earlier:
        outcomes[p.index] = _judge_repeat(p, stored.get(p.key), key_path(p.index))
    created = [(p.run, outcomes[p.index]) for p in to_insert]
    tell_sources([(run, o.id) for run, o in created if o.status == "created" and o.id], created_at)
    return [outcomes[p.index] for p in pending]


def tell_sources(runs: Sequence[tuple[EnvelopeIn, int]], now: datetime | None = None) -> None:
    """Write what newly stored reports (with their run ids) say about their sources: a call
    started inside a source's Retry-After hold is early, whatever its query; every success and
    failure feeds the source's breaker, budget and hold, as the built-in coordinator's calls do.
    The reports stand whatever happens here: an error is logged, never answered."""
    now = now or timezone.now()
    answers = [answer for run, _ in runs if (answer := _answer(run, now)) is not None]
    try:
        with transaction.atomic() if connection.in_atomic_block else nullcontext():
            known = _mark_early(runs, answers)
            closed = budget.record(answers, now, known)
        _wake(closed, now)
    except DatabaseError:
        logger.warning("reports stored, but not fed to their sources' health", exc_info=True)


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


def _judge_repeat(p: Pending, stored: Stored | None, path: str) -> Outcome:
    if stored is None:  # deleted between our insert and our select: rare, and safe to resend
        error = ApiError(503, FailureCategory.SERVER_FAULT, "The stored run vanished; resend.")
        return Outcome(p.index, "rejected", None, error)
    if stored.digest != p.digest:
        return Outcome(p.index, "rejected", None, key_reused(p.key, stored.id, path))
    return Outcome(p.index, "existing", stored.id, created_at=stored.created_at)


def ingest_batch(
    token_id: int, items: Sequence[Any], digests: Sequence[str] | None = None
) -> list[Outcome]:
    """Validate each item on its own, store the valid ones, and say what happened to each.
    `digests` replaces each item's hash (spans compare the span as sent: see `otlp`)."""
    outcomes: dict[int, Outcome] = {}
    pending: list[Pending] = []
    for index, raw in enumerate(items):
        run, errors = validate_item(raw, f"runs.{index}")
        if run is None:
            outcomes[index] = Outcome(index, "rejected", None, invalid("Invalid run.", errors))
            continue
        digest = digests[index] if digests is not None else request_hash(raw)
        pending.append(Pending(index, named(run, token_id), token_id, run.idempotency_key, digest))
    reclassify(p.run for p in pending)
    missing = reference_errors(pending, lambda i: f"runs.{i}")
    for index, errors in missing.items():
        outcomes[index] = Outcome(
            index, "rejected", None, invalid("Invalid reference to a workflow or run.", errors)
        )
    valid = [p for p in pending if p.index not in missing]
    if valid:
        for outcome in store(token_id, valid, lambda i: f"runs.{i}.idempotency_key"):
            outcomes[outcome.index] = outcome
    return [outcomes[index] for index in range(len(items))]


def ingest_one(
    token_id: int, run: RunIn, raw: dict[str, Any], header_key: str | None
) -> tuple[Run, bool]:
    """Store one report (sharing an INSERT and commit with those arriving together), or find its
    identical earlier report; return the run and whether it was the earlier one."""
    if header_key and run.idempotency_key and header_key != run.idempotency_key:
        raise invalid(
            "The Idempotency-Key header and the body's idempotency_key differ.",
            [FieldError("idempotency_key", "differs from the Idempotency-Key header")],
        )
    errors = consistency_errors(run)
    if errors:
        raise invalid("Invalid run.", errors)
    run.scrub(scrubbing.current())  # before anything is stored
    key = scrubbing.scrub_idempotency_key(header_key) or run.idempotency_key
    reclassify([named(run, token_id)])
    p = Pending(0, run, token_id, key, request_hash(raw))
    # Inside a caller's transaction the commit is the caller's: nobody else's report rides on it.
    alone = connection.in_atomic_block
    outcome, created_at = store_group([p])[0] if alone else GROUP.submit(p)
    if outcome.error is not None:
        raise outcome.error
    if outcome.status == "created":
        # Not read back: a read after the commit could fail and turn a stored report into an error.
        return inserted_run(p, outcome.id, created_at), False
    bound = {"created_at": outcome.created_at} if outcome.created_at is not None else {}
    return Run.objects.get(pk=outcome.id, **bound), True


def store_group(items: Sequence[Pending]) -> list[tuple[Outcome, datetime]]:
    """Store single reports of any tokens as one group; return each one's outcome and time.
    Should the group's INSERT fail on a value validation let through, each report is stored again
    alone, so that the others are not refused with it."""
    group = list(items)
    for i, p in enumerate(group):
        p.index = i
    outcomes: dict[int, Outcome] = {}
    for index, errors in reference_errors(group, lambda i: "").items():
        refusal = invalid("Invalid reference to a workflow or run.", errors)
        outcomes[index] = Outcome(index, "rejected", None, refusal)
    valid = [p for p in group if p.index not in outcomes]
    created_at = timezone.now()
    try:
        outcomes |= _store_by_token(valid, created_at)
    except (IntegrityError, DataError):
        if len(valid) < 2:
            raise
        for p in valid:
            try:
                outcomes |= _store_by_token([p], created_at)
            except (IntegrityError, DataError) as exc:
                outcomes[p.index] = Outcome(p.index, "rejected", None, _refusal(exc))
    return [(outcomes[p.index], created_at) for p in group]


def _store_by_token(pending: Sequence[Pending], created_at: datetime) -> dict[int, Outcome]:
    by_token: dict[int, list[Pending]] = {}
    for p in pending:
        by_token.setdefault(p.token_id, []).append(p)
    outcomes: dict[int, Outcome] = {}
    # One token (the usual case): one INSERT, atomic by itself. Several: one commit for all, the
    # tokens in id order (as keys within one), so two processes' groups cannot deadlock.
    with transaction.atomic() if len(by_token) > 1 else nullcontext():
        for token_id, items in sorted(by_token.items()):
            for outcome in store(token_id, items, lambda i: "Idempotency-Key", created_at):
                outcomes[outcome.index] = outcome
    return outcomes


def _refusal(exc: Exception) -> ApiError:
    if isinstance(exc, IntegrityError):
        return invalid("The request conflicts with stored data.", (), 409)
    return invalid("A value does not fit its database column.")


GROUP: GroupCommit[Pending, tuple[Outcome, datetime]] = GroupCommit(
    store_group, lambda: settings.INGEST_GROUP_MAX
)


def inserted_run(p: Pending, pk: int, created_at: datetime) -> Run:
    values = dict(zip(_row_attnames(), p.row or _row(p), strict=True))
    project_id = project_of(p.token_id)
    return Run(id=pk, token_id=p.token_id, project_id=project_id, created_at=created_at, **values)


@cache
def _row_attnames() -> tuple[str, ...]:
    return tuple(Run._meta.get_field(name).attname for name in ROW_FIELDS)
