"""Recording reported runs: per-item validation, idempotency keys, and the one-statement insert.

This is the ingest hot path (flow 1 of the architecture). A batch costs a fixed number of queries
whatever its size: at most one per kind of reference checked (workflow, retry_of), the insert
that skips stored keys (PostgreSQL: the claimed keys, the new ids, one COPY; SQLite: one
`INSERT … ON CONFLICT DO NOTHING RETURNING`), and one SELECT for the keys that were already
stored. Concurrent repeats of a key produce one row because a unique index arbitrates, never a
read-then-write: on SQLite the run table's `run_idempotency_key_per_token`, on PostgreSQL, where
the run table is partitioned, the claims table `orchestrator_runkey` (see `Run`), whose trigger
fails a batch that lost a race; it is tried again and then skips the key. Nothing else happens
on the request path: no counter rows are updated (dashboard rollups and failure groups are folded
in by periodic jobs). Each failure's group key (`orchestrator.fingerprint.signature`,
microseconds) is written with the row, so grouping never rewrites a run.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cache
from typing import Any

import orjson
import psycopg
import pydantic
from django.conf import settings
from django.db import DataError, IntegrityError, connection, transaction
from django.db.models import DateTimeField, Field, JSONField
from django.utils import timezone
from psycopg.types.json import Jsonb

from classifier import FailureCategory
from orchestrator.api.errors import ApiError, FieldError, invalid
from orchestrator.api.groupcommit import GroupCommit
from orchestrator.api.schemas import EnvelopeIn, RunIn
from orchestrator.fingerprint import signature
from orchestrator.models import Run, Workflow

# Run fields that differ per reported run, in the order of `_row`. Every other column takes one
# value for the whole batch: created_at and token, and the model default of the coordinator's
# bookkeeping (decision, due time, delivery counts …), read from the model at insert time so that
# a field added later needs no change here.
ROW_FIELDS = (
    "workflow",
    "topic",
    "capability",
    "agent",
    "source",
    "operation",
    "attempted",
    "attempt",
    "retry_of",
    "status",
    "result_count",
    "results",
    "failure_type",
    "reported_failure_type",
    "retryable",
    "retry_after",
    "status_code",
    "provider_code",
    "exception_type",
    "signal",
    "detail",
    "exception_chain",
    "partial_results",
    "partial_count",
    "alternatives",
    "signature",
    "started_at",
    "finished_at",
    "duration_ms",
    "idempotency_key",
    "request_hash",
    "trace_id",
    "span_id",
)


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


@dataclass(slots=True)
class Outcome:
    """What happened to one item: created, existing (an identical earlier report), rejected."""

    index: int
    status: str
    id: int | None = None
    error: ApiError | None = None

    def as_dict(self) -> dict[str, Any]:
        error = None
        if self.error is not None:
            error = {
                "failure_type": self.error.failure_type.value,
                "detail": self.error.detail,
                "errors": [e.as_dict() for e in self.error.errors],
            }
        return {"index": self.index, "status": self.status, "id": self.id, "error": error}


# ---------------------------------------------------------------------------------------------
# Validation


def _path(prefix: str, loc: Iterable[Any]) -> str:
    return ".".join(str(part) for part in (prefix, *loc) if part != "")


def validate_item(raw: Any, prefix: str) -> tuple[RunIn | None, list[FieldError]]:
    """Return the validated run, or the errors (with paths under `prefix`) that refuse it."""
    try:
        run = RunIn.model_validate(raw)
    except pydantic.ValidationError as exc:
        return None, [FieldError(_path(prefix, e["loc"]), e["msg"]) for e in exc.errors()]
    errors = consistency_errors(run, prefix)
    return (None if errors else run), errors


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
    """Return {index: errors} for items whose references the database would refuse.

    A workflow or first attempt must exist (foreign keys), and a retry's attempt number must be
    free (`run_unique_retry_attempt`): checked here so that one such item is rejected alone
    instead of failing the batch's single INSERT. A few queries per batch, none without refs.
    """
    errors: dict[int, list[FieldError]] = {}

    def refuse(p: Pending, field: str, message: str) -> None:
        errors.setdefault(p.index, []).append(FieldError(_path(prefix(p.index), [field]), message))

    workflows = {p.run.workflow for p in pending} - {None}
    if workflows:
        known = set(Workflow.objects.filter(pk__in=workflows).values_list("pk", flat=True))
        for p in pending:
            if p.run.workflow is not None and p.run.workflow not in known:
                refuse(p, "workflow", f"no workflow with id {p.run.workflow}")
    retries = [p for p in pending if p.run.retry_of is not None]
    if retries:
        for p, field, message in _retry_conflicts(retries):
            refuse(p, field, message)
    return errors


def _retry_conflicts(retries: Sequence[Pending]) -> Iterable[tuple[Pending, str, str]]:
    """Yield (item, field, reason) for retries of unknown runs or of attempts already taken."""
    firsts = {p.run.retry_of for p in retries}
    known = set(Run.objects.filter(pk__in=firsts).values_list("pk", flat=True))
    taken = {
        (first, attempt): (pk, token_id, key)
        for first, attempt, pk, token_id, key in Run.objects.filter(
            retry_of__in=firsts
        ).values_list("retry_of", "attempt", "pk", "token_id", "idempotency_key")
    }
    claimed: dict[tuple[int, int], str] = {}
    for p in retries:
        slot = (p.run.retry_of, p.run.attempt)
        if p.run.retry_of not in known:
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
    """Hash of the reported JSON, keys sorted, so a key reused for another body is detected.

    Two bodies are the same report when they are equal as JSON data: key order and whitespace do
    not matter. The idempotency key itself is left out (it names the report, it is not in it).
    Hashing the parsed body rather than the validated model is several times cheaper on the
    batch path.
    """
    data = {name: value for name, value in raw.items() if name != "idempotency_key"}
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()


# ---------------------------------------------------------------------------------------------
# Storing


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
    """The ROW_FIELDS values of one run, as Python values (JSON columns as lists and dicts)."""
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
    )


def _batch_values(token_id: int, created_at: datetime) -> list[tuple[Field, Any]]:
    """The columns with one value for the whole batch, and that value ready for the database."""
    given = {"created_at": created_at, "token": token_id}
    return [
        (field, field.get_db_prep_save(given[field.name], connection))
        if field.name in given
        else (field, default)
        for field, default in _batch_defaults()
    ]


@cache
def _batch_defaults() -> tuple[tuple[Field, Any], ...]:
    """Each `_batch_fields` column with its model default, ready for the database (prepared once:
    they are constants, and preparing 17 of them was a tenth of a single report's cost)."""
    connection.ensure_connection()
    return tuple(
        (field, field.get_db_prep_save(field.get_default(), connection))
        for field in _batch_fields()
    )


@cache
def _batch_fields() -> tuple[Field, ...]:
    """The columns `_batch_values` fills, in the table's order."""
    return tuple(
        f for f in Run._meta.concrete_fields if not f.primary_key and f.name not in ROW_FIELDS
    )


def _conflict_clause() -> str:
    quote = connection.ops.quote_name
    # SQLite (unpartitioned): the conflict target repeats the partial unique index's predicate
    # so that it is inferred.
    return (
        f"ON CONFLICT ({quote('token_id')}, {quote('idempotency_key')}) "
        f"WHERE NOT ({quote('idempotency_key')} = '') DO NOTHING "
        f"RETURNING {quote('id')}, {quote('idempotency_key')}"
    )


def _insert_copy(rows: Sequence[tuple], batch: list[tuple[Field, Any]], token_id: int) -> list:
    """PostgreSQL: COPY the rows straight into the run table, ids drawn from its sequence first.

    Three statements whatever the batch size: which keys are already claimed (an index probe
    each in `orchestrator_runkey`), one `nextval` per new row, and the COPY, whose rows psycopg
    writes in C (JSON columns serialised by orjson). COPY is the table's fastest way in: no
    per-row SQL to parse, no JSON document for the server to take apart. The claims trigger
    runs in the COPY's statement, so a key another batch claimed meanwhile fails it (after
    waiting for that batch to commit); it is then tried again, and skips that key as stored.
    """
    table = Run._meta.db_table
    quote = connection.ops.quote_name
    names = [Run._meta.get_field(name).column for name in ROW_FIELDS]
    columns = ["id", *names, *(f.column for f, _ in batch)]
    sql = f"COPY {quote(table)} ({', '.join(map(quote, columns))}) FROM STDIN"
    constants = tuple(_copy_value(value) for _, value in batch)
    connection.ensure_connection()
    for attempt in range(CLAIM_ATTEMPTS):
        try:
            with (
                transaction.atomic(),
                connection.wrap_database_errors,
                connection.connection.cursor() as cursor,
            ):
                claimed = _claimed_keys(cursor, token_id, [row[KEY] for row in rows if row[KEY]])
                fresh = [row for row in rows if not row[KEY] or row[KEY] not in claimed]
                cursor.execute(
                    "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
                    [table, len(fresh)],
                )
                ids = [pk for (pk,) in cursor.fetchall()]
                with cursor.copy(sql) as copy:
                    for pk, row in zip(ids, fresh, strict=True):
                        copy.write_row((pk, *_copy_row(row), *constants))
                return [(pk, row[KEY]) for pk, row in zip(ids, fresh, strict=True)]
        except IntegrityError:
            if attempt == CLAIM_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


KEY = ROW_FIELDS.index("idempotency_key")
_ROW_COLUMNS = tuple(Run._meta.get_field(name).column for name in ROW_FIELDS)


def _claimed_keys(cursor: Any, token_id: int, keys: list[str]) -> set[str]:
    """The idempotency keys among `keys` this token has already claimed (stored runs)."""
    if not keys:
        return set()
    prefix = f"i:{token_id}:"
    cursor.execute(
        "SELECT key FROM orchestrator_runkey WHERE key = ANY(%s)", [[prefix + k for k in keys]]
    )
    return {key[len(prefix) :] for (key,) in cursor.fetchall()}


def _copy_row(row: tuple) -> list:
    """A row as COPY takes it: its JSON columns as jsonb (orjson), the rest as they are."""
    values = list(row)
    for i in _JSON_POSITIONS:
        values[i] = Jsonb(values[i], dumps=orjson.dumps)
    return values


def _copy_value(value: Any) -> Any:
    """A value as COPY takes it: lists and dicts as jsonb (orjson), the rest as they are."""
    if isinstance(value, list | dict):
        return Jsonb(value, dumps=orjson.dumps)
    return value


# A unique violation on a claim means another batch stored the same key meanwhile (it has
# committed: the claim waited for it); the next attempt finds the key stored and skips it.
CLAIM_ATTEMPTS = 3


def _insert_values(rows: Sequence[tuple], batch: list[tuple[Field, Any]], token_id: int) -> list:
    """SQLite: multi-row VALUES, split to respect its bind-parameter limit."""
    quote = connection.ops.quote_name
    fields = [Run._meta.get_field(name) for name in ROW_FIELDS]
    columns = [f.column for f in fields] + [f.column for f, _ in batch]
    constants = tuple(v for _, v in batch)
    rows = [_sqlite_values(row) for row in rows]
    one = "(" + ", ".join(["%s"] * len(columns)) + ")"
    per_statement = max(1, _max_params() // len(columns))
    inserted = []
    with connection.cursor() as cursor:
        for start in range(0, len(rows), per_statement):
            part = rows[start : start + per_statement]
            query = (
                f"INSERT INTO {quote(Run._meta.db_table)} ({', '.join(map(quote, columns))}) "
                f"VALUES {', '.join([one] * len(part))} {_conflict_clause()}"
            )
            cursor.execute(query, [value for row in part for value in (*row, *constants)])
            inserted.extend(cursor.fetchall())
    return inserted


_JSON_POSITIONS = frozenset(
    i for i, name in enumerate(ROW_FIELDS) if isinstance(Run._meta.get_field(name), JSONField)
)
_TIME_POSITIONS = frozenset(
    i for i, name in enumerate(ROW_FIELDS) if isinstance(Run._meta.get_field(name), DateTimeField)
)


def _sqlite_values(row: tuple) -> tuple:
    adapt = connection.ops.adapt_datetimefield_value
    return tuple(
        orjson.dumps(value).decode()
        if i in _JSON_POSITIONS
        else adapt(value)
        if i in _TIME_POSITIONS
        else value
        for i, value in enumerate(row)
    )


def _max_params() -> int:
    connection.ensure_connection()
    raw = connection.connection
    if isinstance(raw, sqlite3.Connection):
        return raw.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    return 999


def insert_rows(
    token_id: int, rows: Sequence[tuple], created_at: datetime | None = None
) -> list[tuple[int, str]]:
    """Insert rows, skipping stored keys; return (id, key) of the rows inserted, in row order.

    On PostgreSQL the ids are drawn before the COPY, in row order; on SQLite row order is the
    RETURNING order of one INSERT, as Django's own bulk_create relies on. Keyed rows are matched
    by key anyway, only keyless ones by order.
    """
    if not rows:
        return []
    batch = _batch_values(token_id, created_at or timezone.now())
    if connection.vendor != "postgresql":
        with transaction.atomic():
            return _insert_values(rows, batch, token_id)
    if len(rows) <= ONE_STATEMENT_ROWS and not connection.in_atomic_block:
        inserted = _insert_one_statement(rows, batch)
        if inserted is not None:
            return inserted
    with transaction.atomic():
        return _insert_copy(rows, batch, token_id)


# Up to this many rows (a group of single reports, a small batch), PostgreSQL is first asked for
# one prepared `INSERT … SELECT` on its own: one round trip where the COPY path takes six (BEGIN,
# the claimed keys, the ids, the COPY, COMMIT), which was most of a single report's cost. Beyond,
# COPY's cheaper rows win.
ONE_STATEMENT_ROWS = 64


def _insert_one_statement(rows: Sequence[tuple], batch: list[tuple[Field, Any]]) -> list | None:
    """PostgreSQL, outside any transaction: insert `rows` with one statement, which is its own
    transaction (autocommit), so the answer comes back once the rows are durable. Return (id,
    key) per row in row order, or None when a key is already claimed (the claims trigger fails
    the whole statement, nothing is stored): the COPY path then skips the stored keys.

    The rows travel as one JSON array (orjson) that `json_populate_recordset` reads as run rows,
    so the statement's text is the same for any number of rows and is prepared once per
    connection: no per-row placeholders to parse on either side. Optimistic on purpose: a
    repeated key is the rare case (a retry whose answer was lost), so it pays the failed
    statement and the slow path, and every other report pays one round trip.
    """
    constants = {f.column: _json_value(value) for f, value in batch if value is not None}
    data = orjson.dumps([dict(zip(_ROW_COLUMNS, row, strict=True), **constants) for row in rows])
    connection.ensure_connection()
    try:
        with connection.wrap_database_errors, psycopg.Cursor(connection.connection) as cursor:
            cursor.execute(_one_statement_sql(), [data.decode()], prepare=True)
            return [tuple(found) for found in cursor.fetchall()]
    except IntegrityError:
        if not any(row[KEY] for row in rows):
            raise  # no key to skip: another constraint refused a row; the caller judges it
        return None


def _json_value(value: Any) -> Any:
    return value.obj if isinstance(value, Jsonb) else value


@cache
def _one_statement_sql() -> str:
    quote = connection.ops.quote_name
    table = quote(Run._meta.db_table)
    columns = ", ".join(map(quote, [*_ROW_COLUMNS, *(f.column for f in _batch_fields())]))
    return (
        f"INSERT INTO {table} ({columns}) SELECT {columns} "
        f"FROM json_populate_recordset(NULL::{table}, %s::json) "
        f"RETURNING {quote('id')}, {quote('idempotency_key')}"
    )


def stored_keys(token_id: int, keys: Iterable[str]) -> dict[str, tuple[int, str]]:
    """Return {key: (id, request_hash)} of this token's stored runs with these keys."""
    wanted = list(set(keys))
    if not wanted:
        return {}
    if connection.vendor == "postgresql":
        return _stored_claims(token_id, wanted)
    rows = Run.objects.filter(token_id=token_id, idempotency_key__in=wanted).values_list(
        "idempotency_key", "id", "request_hash"
    )
    return {key: (pk, digest) for key, pk, digest in rows}


def _stored_claims(token_id: int, keys: list[str]) -> dict[str, tuple[int, str]]:
    """PostgreSQL: the runs of these keys through their claims (one partition read each)."""
    prefix = f"i:{token_id}:"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT r.idempotency_key, r.id, r.request_hash FROM orchestrator_runkey k "
            "JOIN orchestrator_run r ON r.id = k.run_id AND r.created_at = k.created_at "
            "WHERE k.key = ANY(%s)",
            [[prefix + key for key in keys]],
        )
        return {key: (pk, digest) for key, pk, digest in cursor.fetchall()}


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
    """Insert the valid items; return one outcome per item, in the order given."""
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
    inserted = insert_rows(token_id, [_row(p) for p in to_insert], created_at)

    stored = {key: (pk, first[key].digest) for pk, key in inserted if key}
    keyless = iter(pk for pk, key in inserted if not key)
    outcomes = {p.index: Outcome(p.index, "created", next(keyless)) for p in to_insert if not p.key}
    outcomes |= {
        p.index: Outcome(p.index, "created", stored[p.key][0]) for p in to_insert if p.key in stored
    }
    earlier = [p for p in (*to_insert, *repeats) if p.key and p.index not in outcomes]
    stored |= stored_keys(token_id, (p.key for p in earlier if p.key not in stored))
    for p in earlier:
        outcomes[p.index] = _judge_repeat(p, stored.get(p.key), key_path(p.index))
    return [outcomes[p.index] for p in pending]


def _judge_repeat(p: Pending, stored: tuple[int, str] | None, path: str) -> Outcome:
    if stored is None:  # deleted between our insert and our select: rare, and safe to resend
        error = ApiError(503, FailureCategory.SERVER_FAULT, "The stored run vanished; resend.")
        return Outcome(p.index, "rejected", None, error)
    pk, digest = stored
    if digest != p.digest:
        return Outcome(p.index, "rejected", None, key_reused(p.key, pk, path))
    return Outcome(p.index, "existing", pk)


# ---------------------------------------------------------------------------------------------
# The two entry points


def ingest_batch(
    token_id: int, items: Sequence[Any], digests: Sequence[str] | None = None
) -> list[Outcome]:
    """Validate each item on its own, store the valid ones, and say what happened to each.

    `digests` replaces the hash of each item's JSON as what a repeated key is compared with
    (spans compare the span as it was sent, not the run read from it: see `otlp`)."""
    outcomes: dict[int, Outcome] = {}
    pending: list[Pending] = []
    for index, raw in enumerate(items):
        run, errors = validate_item(raw, f"runs.{index}")
        if run is None:
            outcomes[index] = Outcome(index, "rejected", None, invalid("Invalid run.", errors))
            continue
        digest = digests[index] if digests is not None else request_hash(raw)
        pending.append(Pending(index, run, token_id, run.idempotency_key, digest))
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
    """Store one report, or find its identical earlier report; return the run and whether it
    was the earlier one (an idempotent replay). Raise ApiError otherwise.

    Reports arriving together share one INSERT and one commit (`GROUP`); each is answered once
    its row is committed."""
    if header_key and run.idempotency_key and header_key != run.idempotency_key:
        raise invalid(
            "The Idempotency-Key header and the body's idempotency_key differ.",
            [FieldError("idempotency_key", "differs from the Idempotency-Key header")],
        )
    key = header_key or run.idempotency_key
    errors = consistency_errors(run)
    if errors:
        raise invalid("Invalid run.", errors)
    p = Pending(0, run, token_id, key, request_hash(raw))
    # Inside a caller's transaction the commit is the caller's: nobody else's report rides on it.
    alone = connection.in_atomic_block
    outcome, created_at = store_group([p])[0] if alone else GROUP.submit(p)
    if outcome.error is not None:
        raise outcome.error
    if outcome.status == "created":
        # Answered from what was inserted: a read after the commit could fail (the database
        # going away) and turn a stored report into an error its sender would resend.
        return inserted_run(p, outcome.id, created_at), False
    return Run.objects.get(pk=outcome.id), True  # an identical earlier report: the stored row


def store_group(items: Sequence[Pending]) -> list[tuple[Outcome, datetime]]:
    """Store single reports of any tokens as one group; return each one's outcome and time.

    The batch path's steps over the whole group: one query per kind of reference, one INSERT per
    token (several in one transaction), one SELECT for repeated keys. Should the group's INSERT
    fail on a value validation let through, each report is stored again alone, so that the
    others are not refused with it.
    """
    group = [replace(p, index=i) for i, p in enumerate(items)]
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


# Single reports of this process, grouped (INGEST_GROUP_MAX reports at most per group).
GROUP: GroupCommit[Pending, tuple[Outcome, datetime]] = GroupCommit(
    store_group, lambda: settings.INGEST_GROUP_MAX
)


def inserted_run(p: Pending, pk: int, created_at: datetime) -> Run:
    """The Run row `insert_rows` wrote for `p`, as an instance (the model's defaults elsewhere)."""
    row = zip(ROW_FIELDS, _row(p), strict=True)
    values = {Run._meta.get_field(name).attname: value for name, value in row}
    return Run(id=pk, token_id=p.token_id, created_at=created_at, **values)
