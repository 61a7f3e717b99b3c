"""The ingest pipeline: every new report and every finish, however it arrives (REST single,
batch, PATCH, OTLP, MCP), takes the same steps, in this order, each one function of this module:

1. check: the schema, then the envelope's own rules (`consistency_errors`) and bounds;
2. scrub: secrets filtered out of what the call held (`scrub`, the one call of the scrubber);
3. name and reclassify: the agent and source a report leaves out; a failure classified under an
   older policy classified again (`reclassify`);
4. store: one mapping from envelope to run columns (`report_columns`, `Run.outcome_fields`),
   inserted in as few statements as the size allows, idempotency keys judged by a unique index;
5. tell the sources: what the stored reports say about their sources (breaker, budget,
   Retry-After hold, calls started inside a hold), written after them (`sources`).

A batch costs a fixed number of queries whatever its size. Concurrent repeats of a key produce one
row because a unique index arbitrates, never a read-then-write (on PostgreSQL the claims table,
see `Run`). No counter is updated on the request path: periodic jobs fold them in.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import orjson
import pydantic
from django.conf import settings
from django.db import DataError, IntegrityError, connection, transaction
from django.utils import timezone

from classifier import FailureCategory
from classifier.envelope import ENVELOPE_KEYS, EVIDENCE_KEYS, OUTCOME_KEYS
from classifier.scrub import ENVELOPE_FIELDS, IDENTITY_FIELDS, Scrubber
from orchestrator import pricing, scopes, scrubbing
from orchestrator.ingest.costs import columns as cost_columns
from orchestrator.ingest.costs import finish_fields
from orchestrator.ingest.groupcommit import GroupCommit
from orchestrator.ingest.inserts import Stored, insert_rows, stored_keys
from orchestrator.ingest.reclassify import reclassify
from orchestrator.ingest.sources import tell_finish, tell_sources
from orchestrator.memo import LocalMemo
from orchestrator.models import ApiToken, Run, Workflow
from orchestrator.models.runs import outcome_columns
from orchestrator.models.tokens import project_of
from orchestrator.refusals import ApiError, FieldError, invalid
from orchestrator.schemas import EnvelopeIn, RunFinishIn, RunIn

logger = logging.getLogger(__name__)

# What a `running` report cannot carry yet: its outcome, and when it ended.
OUTCOME_FIELDS = (*OUTCOME_KEYS, "finished_at", "duration_ms")
# The envelope's fields `envelope_of` hands to `outcome_columns` (the vocabulary's version aside).
ENVELOPE_FIELDS_READ = tuple(k for k in (*ENVELOPE_KEYS, *EVIDENCE_KEYS) if k != "taxonomy_version")
# A single report's key, in the error paths that name it.
HEADER_KEY_PATH = "Idempotency-Key"


@dataclass(slots=True)
class Report:
    """One report as it arrived: its JSON body as sent; its run, when the caller's schema has
    validated it already (else the pipeline does); the Idempotency-Key header of a single report;
    the digest that replaces the body's hash (spans compare the span as sent: see `span_joins`)."""

    body: Any
    run: RunIn | None = None
    key: str | None = None
    digest: str | None = None


@dataclass(slots=True)
class Pending:
    """A valid item on its way into the table."""

    index: int
    run: RunIn
    token_id: int
    key: str
    digest: str
    scrubbed: int = 0
    columns: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Outcome:
    """What happened to one report: created, existing (an identical earlier report), rejected.
    `run` is the stored run of a report accepted alone (`accept(..., alone=True)`)."""

    index: int
    status: str
    id: int | None = None
    error: ApiError | None = None
    created_at: datetime | None = None  # of an existing run, when known
    run: Run | None = None

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


def accept(
    token_id: int, reports: Sequence[Report | Mapping[str, Any]], *, alone: bool = False
) -> list[Outcome]:
    """Take new reports of token `token_id` through the pipeline; return what happened to each,
    in order. A report is a `Report`, or just its JSON body.

    Each report is judged alone: one that is invalid, names an unknown workflow or run, or reuses
    a key for another body is `rejected` (with the reason, its paths under `runs.<index>`)
    without losing the others. `alone`: one single report (REST `POST /runs`, MCP), whose error
    paths are the body's own and whose key may come from the Idempotency-Key header; it shares
    its INSERT and commit with single reports arriving at the same time, and its outcome carries
    the stored `run`."""
    reports = [r if isinstance(r, Report) else Report(r) for r in reports]
    outcomes: dict[int, Outcome] = {}
    valid: list[tuple[int, Report, RunIn]] = []
    for index, report in enumerate(reports):
        prefix = "" if alone else f"runs.{index}"
        run, errors = checked(report, prefix)
        if run is None:
            outcomes[index] = Outcome(index, "rejected", None, invalid("Invalid run.", errors))
            continue
        valid.append((index, report, run))
    pending: list[Pending] = []
    counts = scrub_all([run for _, _, run in valid])
    for (index, report, run), scrubbed in zip(valid, counts, strict=True):
        digest = report.digest if report.digest is not None else request_hash(report.body)
        key = scrubbing.scrub_idempotency_key(report.key) or run.idempotency_key
        pending.append(Pending(index, named(run, token_id), token_id, key, digest, scrubbed))
    reclassify(p.run for p in pending)
    if alone:
        for p in pending:
            index = p.index  # a group numbers its reports anew
            outcomes[index] = _store_alone(p)
            outcomes[index].index = index
    elif pending:
        for outcome in _store_batch(token_id, pending):
            outcomes[outcome.index] = outcome
    return [outcomes[index] for index in range(len(reports))]


def finish(run: Run, outcome: RunFinishIn) -> Run:
    """Finish an agent's run reported as `running`, once, with `outcome` (the envelope, under the
    names and aliases of a report), through the same steps as a new report; tell its source.
    Return the run. The same outcome again returns the run as it was finished (a retry whose
    answer was lost, whatever time it says); raise ApiError (409) for another outcome, a run the
    built-in coordinator runs, or one the running deadline finished first, and (422) for an
    outcome that breaks the envelope's rules."""
    if not run.is_reported:
        raise _conflict(f"Run {run.pk} is run by the built-in coordinator: it records its own.")
    errors = consistency_errors(outcome)
    if errors:
        raise invalid("Invalid outcome.", errors)
    scrubbed = scrub(outcome)
    reclassify([outcome], [run.source])
    finished = outcome.finished_at or timezone.now()
    started = run.started_at or run.created_at
    if finished < started:
        raise invalid("Invalid outcome.", [FieldError("finished_at", "is before the run started")])
    envelope = envelope_of(outcome)
    if envelope["duration_ms"] is None:
        envelope["duration_ms"] = (finished - started).total_seconds() * 1000
    extra = {
        "reported_failure_type": outcome.reported_failure_type,
        "classified_policy_version": outcome.classified_policy_version,
        # What the start reported filtered stays counted while its attempted call does.
        "scrubbed_fields": scrubbed + (0 if outcome.attempted else run.scrubbed_fields),
    }
    extra |= finish_fields(outcome.usage, outcome.cost, run)
    if run.finish_reported(envelope, finished, **extra):
        tell_finish(run)
        return run
    run.refresh_from_db()
    if run.finished_by_deadline:
        raise _finished_by_deadline(run)
    # The same outcome again is the same finish, whatever time the retry says it finished at;
    # the first finish's time stays.
    if run.status != Run.Status.RUNNING and run.same_outcome(envelope):
        return run
    raise _conflict(f"Run {run.pk} already finished ({run.status}) with another outcome.")


def _finished_by_deadline(run: Run) -> ApiError:
    return ApiError(
        409,
        FailureCategory.INVALID_INPUT,
        f"Run {run.pk} was finished by the running deadline at {run.finished_at.isoformat()}, "
        f"as a {run.failure_type} failure, before this finish came: {run.detail}",
        alternatives=[
            "report a new run (retry_of this one) for a new attempt",
            "finish runs sooner, or give this token a longer running timeout "
            "(manage.py createtoken --running-timeout, the admin, or RUN_RUNNING_TIMEOUT)",
        ],
    )


def _conflict(detail: str) -> ApiError:
    return ApiError(
        409,
        FailureCategory.INVALID_INPUT,
        detail,
        alternatives=["report a new run (retry_of this one) for a new attempt"],
    )


def checked(report: Report, prefix: str) -> tuple[RunIn | None, list[FieldError]]:
    """Step 1: the report's run, validated against the schema and the envelope's rules, or None
    and why not."""
    run = report.run
    if run is None:
        try:
            run = RunIn.model_validate(report.body)
        except pydantic.ValidationError as exc:
            return None, [FieldError(_path(prefix, e["loc"]), e["msg"]) for e in exc.errors()]
    if report.key and run.idempotency_key and report.key != run.idempotency_key:
        return None, [FieldError("idempotency_key", "differs from the Idempotency-Key header")]
    errors = consistency_errors(run, prefix)
    return (None, errors) if errors else (run, errors)


def scrub(run: EnvelopeIn, scrubber: Scrubber | None = None) -> int:
    """Step 2, before anything is stored: filter the secrets out of the whole report: what the
    agent's call held (`classifier.scrub.ENVELOPE_FIELDS`) and the fields naming it (source,
    topic, the usage's model …, whose URLs lose user info and query values), and its idempotency
    key (a digest of it when it holds a credential); return how many values are filtered (those a
    client's filters left `[Filtered]` too). The pipeline's one call of the scrubber."""
    scrubber = scrubber or scrubbing.current()
    values, named, key, names = _scrubbed_parts(run)
    clean, clean_names, found = scrubber.split(values, names)  # one look: most hold nothing
    if clean is not values:
        for name, value, new in zip(ENVELOPE_FIELDS, values, clean, strict=True):
            if new is not value:
                setattr(run, name, new[:200] if name == "operation" else new)
    if clean_names is not names:
        for (name, value, limit), new in zip(named, clean_names, strict=False):
            if new is not value and name == "usage.model":
                run.usage.model = new[:limit]
            elif new is not value:
                setattr(run, name, new[:limit])
        if key and clean_names[-1] != key:
            run.idempotency_key = scrubber.idempotency_key(key)
    return found


def _scrubbed_parts(run: EnvelopeIn) -> tuple[list[Any], list[tuple[str, str, int]], str, list]:
    """What `scrub` looks at in `run`: the call's values, the identity fields (name, value,
    limit), the idempotency key, and the names (the identity values and the key)."""
    values = [getattr(run, name, None) for name in ENVELOPE_FIELDS]
    named = _identity_fields(run)
    key = getattr(run, "idempotency_key", None) or ""
    names = [value for _, value, _ in named] + ([key] if key else [])
    return values, named, key, names


# Reports `scrub_all` scrubs one by one once a look cannot clear them all: below this, another
# look at each half costs more than the reports' own looks.
SCRUB_ONE_BY_ONE = 8


def scrub_all(runs: Sequence[EnvelopeIn]) -> list[int]:
    """`scrub` each of `runs`; return how many values each had filtered. One look at them all
    first (`Scrubber.holds_nothing`): most batches hold no secret, and then nothing more is done.
    A look that cannot clear a group looks at its halves, so a batch with one secret costs a few
    looks, and only the reports no look clears are scrubbed one by one."""
    scrubber = scrubbing.current()
    found = [0] * len(runs)
    parts = [_scrubbed_parts(run) for run in runs]

    def clear(lo: int, hi: int) -> bool:
        looked = [value for values, _, _, names in parts[lo:hi] for value in (*values, *names)]
        urls = any("://" in name for _, _, _, names in parts[lo:hi] for name in names)
        return not urls and scrubber.holds_nothing(looked)

    groups = [(0, len(runs))]
    while groups:
        lo, hi = groups.pop()
        if hi - lo > SCRUB_ONE_BY_ONE and not clear(lo, hi):
            mid = (lo + hi) // 2
            groups += [(lo, mid), (mid, hi)]
        elif hi - lo <= SCRUB_ONE_BY_ONE:
            for i in range(lo, hi):
                found[i] = scrub(runs[i], scrubber)
    return found


# The column sizes of the identity fields (`scrub`), 100 for the others.
IDENTITY_LIMITS = {"operation": 200, "topic": 200, "exception_type": 300, "provider_code": 200}


def _identity_fields(run: EnvelopeIn) -> list[tuple[str, str, int]]:
    """(name, value, length limit) of each field naming the report that it holds as text."""
    found = []
    for name in IDENTITY_FIELDS:
        value = getattr(run, name, None)
        if isinstance(value, str) and value:
            found.append((name, value, IDENTITY_LIMITS.get(name, 100)))
    usage = getattr(run, "usage", None)
    if usage is not None and usage.model:
        found.append(("usage.model", usage.model, 200))
    return found


def named(run: RunIn, token_id: int) -> RunIn:
    """Step 3: `run` with the agent (the token's name) and the source (`attempted.source`, else
    "unknown") a verbatim envelope leaves out."""
    if run.agent is None:
        names = ApiToken.objects.filter(pk=token_id).values_list("name", flat=True)
        token_name = _TOKEN_NAMES.get(token_id, names.first) or ""
        run.agent = token_name[:100] or UNKNOWN_SOURCE
    if run.source is None:
        source = run.attempted.get("source")
        fits = isinstance(source, str) and 0 < len(source) <= 100
        run.source = scrubbing.current().identity(source) if fits else UNKNOWN_SOURCE
    return run


# The agent or source of a report that names none and gives nothing to name it by.
UNKNOWN_SOURCE = "unknown"
# Token names by id, for reports that name no agent; a rename shows within a minute.
_TOKEN_NAMES: LocalMemo[str | None] = LocalMemo(lambda: 60.0)


def envelope_of(run: EnvelopeIn) -> dict[str, Any]:
    """The report's envelope as data, under the envelope's own names (`classifier.envelope`)."""
    envelope = {name: getattr(run, name) for name in ENVELOPE_FIELDS_READ}
    if run.failure_type is not None:
        envelope["failure_type"] = run.failure_type.value
    envelope["signal"] = run.signal.value if run.signal else ""
    envelope["duration_ms"] = run.duration_ms
    return envelope


def report_columns(p: Pending, prices: pricing.PriceTable | None = None) -> dict[str, Any]:
    """Step 4's mapping: the run columns a new report sets, by attribute name (the outcome's
    through `outcome_columns`, as a finish and the built-in coordinator's runs do); priced from
    `prices`, else the current price table."""
    run = p.run
    started, finished = _report_times(run)
    columns = outcome_columns(envelope_of(run), run.source, started, finished)
    columns.update(
        workflow_id=run.workflow,
        topic=run.topic,
        capability=run.capability,
        agent=run.agent,
        source=run.source,
        operation=_operation(run),
        attempt=run.attempt,
        retry_of_id=run.retry_of,
        reported_failure_type=run.reported_failure_type,
        classified_policy_version=run.classified_policy_version,
        started_at=started,
        idempotency_key=p.key,
        request_hash=p.digest,
        trace_id=run.trace_id,
        span_id=run.span_id,
        scrubbed_fields=p.scrubbed,
    )
    at = run.started_at or timezone.now()
    columns.update(cost_columns(run.usage, run.cost, run.source, at, prices))
    return columns


def _report_times(run: Any) -> tuple[datetime | None, datetime | None]:
    """When a report's run started and finished. A finished report that gives its duration and
    no times (the SDK's `track()` sends none) finished when it arrived and started its duration
    before: a run page never shows a duration beside no start and no finish."""
    started, finished = run.started_at, run.finished_at
    if run.status == "running" or run.duration_ms is None:
        return started, finished
    if finished is None:
        finished = timezone.now()
    if started is None:
        started = finished - timedelta(milliseconds=run.duration_ms)
    return started, finished


def restated(token_id: int, body: Any) -> tuple[dict[str, Any] | None, list[FieldError]]:
    """Steps 1 to 3 for a report that replaces a stored run's columns (a late part of a span's
    run): the columns it sets, or None and why not."""
    run, errors = checked(Report(body), "")
    if run is None:
        return None, errors
    p = Pending(0, named(run, token_id), token_id, run.idempotency_key, "", scrub(run))
    reclassify([p.run])
    return report_columns(p), errors


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


def _operation(run: RunIn) -> str:
    if run.operation:
        return run.operation
    named = run.attempted.get("operation")
    return named[:200] if isinstance(named, str) else ""


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
    prices = pricing.current()
    for p in to_insert:
        p.columns = report_columns(p, prices)
    inserted = insert_rows(token_id, [p.columns for p in to_insert], created_at)

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


def _judge_repeat(p: Pending, stored: Stored | None, path: str) -> Outcome:
    if stored is None:  # deleted between our insert and our select: rare, and safe to resend
        error = ApiError(503, FailureCategory.SERVER_FAULT, "The stored run vanished; resend.")
        return Outcome(p.index, "rejected", None, error)
    if stored.digest != p.digest:
        return Outcome(p.index, "rejected", None, key_reused(p.key, stored.id, path))
    return Outcome(p.index, "existing", stored.id, created_at=stored.created_at)


def _store_batch(token_id: int, pending: Sequence[Pending]) -> list[Outcome]:
    """Step 4 for a batch: items whose references the database would refuse are rejected alone,
    the others stored in one statement (COPY beyond a few dozen)."""
    outcomes: list[Outcome] = []
    missing = reference_errors(pending, lambda i: f"runs.{i}")
    for index, errors in missing.items():
        refusal = invalid("Invalid reference to a workflow or run.", errors)
        outcomes.append(Outcome(index, "rejected", None, refusal))
    valid = [p for p in pending if p.index not in missing]
    if valid:
        outcomes.extend(store(token_id, valid, lambda i: f"runs.{i}.idempotency_key"))
    return outcomes


def _store_alone(p: Pending) -> Outcome:
    """Step 4 for a single report: stored with those arriving together (one INSERT and commit),
    or its identical earlier report found; its outcome carries the run."""
    # Inside a caller's transaction the commit is the caller's: nobody else's report rides on it.
    alone = connection.in_atomic_block
    outcome, created_at = store_group([p])[0] if alone else GROUP.submit(p)
    if outcome.status == "created":
        # Not read back: a read after the commit could fail and turn a stored report into an error.
        outcome.run = inserted_run(p, outcome.id, created_at)
    elif outcome.status == "existing":
        bound = {"created_at": outcome.created_at} if outcome.created_at is not None else {}
        outcome.run = Run.objects.get(pk=outcome.id, **bound)
    return outcome


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
            for outcome in store(token_id, items, lambda i: HEADER_KEY_PATH, created_at):
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
    """The run a report just inserted, built from its columns (not read back)."""
    project_id = project_of(p.token_id)
    columns = p.columns or report_columns(p)
    return Run(id=pk, token_id=p.token_id, project_id=project_id, created_at=created_at, **columns)
