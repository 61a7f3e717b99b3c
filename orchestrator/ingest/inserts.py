"""Writing run rows into the run table with the fastest statement for the size, keys already
stored skipped. PostgreSQL: a small group as one prepared `INSERT … SELECT`, a batch as COPY;
SQLite: multi-row `INSERT … ON CONFLICT DO NOTHING RETURNING`."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal
from functools import cache
from typing import Any, NamedTuple

import orjson
import psycopg
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connection, connections, transaction
from django.db.models import DateTimeField, Field, JSONField
from django.utils import timezone
from psycopg.types.json import Jsonb

from orchestrator.models import Run
from orchestrator.models.tokens import project_of

# Fields that differ per run; every other column takes its model default (read at insert time,
# so a field added later needs no change here), created_at, the token or the token's project.
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
    "classified_policy_version",
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
    "scrubbed_fields",
    *Run.USAGE_FIELDS,
)
# The same by attribute name (`workflow_id`), as the pipeline's columns name them.
ROW_ATTNAMES = tuple(Run._meta.get_field(name).attname for name in ROW_FIELDS)


def _batch_values(token_id: int, created_at: datetime) -> list[tuple[Field, Any]]:
    given = {"created_at": created_at, "token": token_id, "project": project_of(token_id)}
    # Not the `connection` proxy: each use of it looks this thread's connection up again.
    db = connections[DEFAULT_DB_ALIAS]
    return [
        (field, field.get_db_prep_save(given[field.name], db))
        if field.name in given
        else (field, default)
        for field, default in _batch_defaults()
    ]


@cache
def _batch_defaults() -> tuple[tuple[Field, Any], ...]:
    """Each `_batch_fields` column with its model default, ready for the database, once."""
    connection.ensure_connection()
    return tuple(
        (field, field.get_db_prep_save(field.get_default(), connection))
        for field in _batch_fields()
    )


@cache
def _batch_fields() -> tuple[Field, ...]:
    return tuple(
        f for f in Run._meta.concrete_fields if not f.primary_key and f.name not in ROW_FIELDS
    )


def _conflict_clause() -> str:
    quote = connection.ops.quote_name
    # The conflict target repeats the partial unique index's predicate so that it is inferred.
    return (
        f"ON CONFLICT ({quote('token_id')}, {quote('idempotency_key')}) "
        f"WHERE NOT ({quote('idempotency_key')} = '') DO NOTHING "
        f"RETURNING {quote('id')}, {quote('idempotency_key')}"
    )


def _insert_copy(rows: Sequence[tuple], batch: list[tuple[Field, Any]], token_id: int) -> list:
    """PostgreSQL: COPY the rows into the run table, ids drawn from its sequence first. A key
    another batch claimed meanwhile fails the COPY (the claims trigger); the retry skips it."""
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
                # Server-side binding: the keys travel as one array, not 1,000 literals to parse.
                psycopg.Cursor(connection.connection) as cursor,
            ):
                claimed = _claimed_keys(cursor, token_id, [row[KEY] for row in rows if row[KEY]])
                fresh = [row for row in rows if not row[KEY] or row[KEY] not in claimed]
                if not fresh:
                    return []
                cursor.execute(_DRAW_IDS, [table, len(fresh)])
                ids = [pk for (pk,) in cursor.fetchall()]
                with cursor.copy(sql) as copy:
                    for pk, row in zip(ids, fresh, strict=True):
                        copy.write_row((pk, *_copy_row(row), *constants))
                return [(pk, row[KEY]) for pk, row in zip(ids, fresh, strict=True)]
        except IntegrityError:
            if attempt == CLAIM_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


# The sequence is looked up once (a materialized CTE), not once per row.
_DRAW_IDS = (
    "WITH s AS MATERIALIZED (SELECT pg_get_serial_sequence(%s, 'id')::regclass AS seq) "
    "SELECT nextval(s.seq) FROM s, generate_series(1, %s)"
)
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
    if isinstance(value, list | dict):
        return Jsonb(value, dumps=orjson.dumps)
    return value


# A unique violation on a claim: another batch committed the key meanwhile; a retry skips it.
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
    token_id: int, runs: Sequence[dict[str, Any]], created_at: datetime | None = None
) -> list[tuple[int, str]]:
    """Insert runs (their columns by attribute name: `ROW_ATTNAMES`, the rest take their
    defaults), skipping stored keys; return (id, key) of the rows inserted, in order (SQLite's
    RETURNING order, as Django's own bulk_create relies on)."""
    if not runs:
        return []
    rows = [tuple(columns[name] for name in ROW_ATTNAMES) for columns in runs]
    batch = _batch_values(token_id, created_at or timezone.now())
    db = connections[DEFAULT_DB_ALIAS]
    if db.vendor != "postgresql":
        with transaction.atomic():
            return _insert_values(rows, batch, token_id)
    if len(rows) <= ONE_STATEMENT_ROWS and not db.in_atomic_block:
        inserted = _insert_one_statement(rows, batch)
        if inserted is not None:
            return inserted
    with transaction.atomic():
        return _insert_copy(rows, batch, token_id)


# Up to this many rows one `INSERT … SELECT` (one round trip) beats COPY's six.
ONE_STATEMENT_ROWS = 64


def _insert_one_statement(rows: Sequence[tuple], batch: list[tuple[Field, Any]]) -> list | None:
    """PostgreSQL, autocommit: insert `rows` with one statement; return (id, key) per row, or None
    when a key is already claimed (nothing stored: the COPY path then skips it). The rows travel as
    one JSON array, so the statement's text is the same for any number of rows and is prepared
    once (psycopg ignores `prepare=True` without DATABASE_PREPARED_STATEMENTS' threshold).
    Optimistic: a repeated key (a retry whose answer was lost) is the rare case."""
    constants = {f.column: _json_value(value) for f, value in batch if value is not None}
    data = orjson.dumps(
        [dict(zip(_ROW_COLUMNS, row, strict=True), **constants) for row in rows], default=_decimal
    )
    db = connections[DEFAULT_DB_ALIAS]
    db.ensure_connection()
    try:
        with db.wrap_database_errors, psycopg.Cursor(db.connection) as cursor:
            cursor.execute(_one_statement_sql(), [data.decode()], prepare=True)
            return [tuple(found) for found in cursor.fetchall()]
    except IntegrityError:
        if not any(row[KEY] for row in rows):
            raise  # no key to skip: another constraint refused a row; the caller judges it
        return None


def _decimal(value: Any) -> str:
    """A cost as JSON: its decimal string (numeric reads it back exactly), never a float."""
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


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


class Stored(NamedTuple):
    """A stored run a repeated key points at; its creation time names its partition."""

    id: int
    digest: str
    created_at: datetime | None = None


def stored_keys(token_id: int, keys: Iterable[str]) -> dict[str, Stored]:
    wanted = list(set(keys))
    if not wanted:
        return {}
    if connection.vendor == "postgresql":
        return _stored_claims(token_id, wanted)
    rows = Run.objects.filter(token_id=token_id, idempotency_key__in=wanted).values_list(
        "idempotency_key", "id", "request_hash", "created_at"
    )
    return {key: Stored(pk, digest, created) for key, pk, digest, created in rows}


def _stored_claims(token_id: int, keys: list[str]) -> dict[str, Stored]:
    """PostgreSQL: the runs of these keys through their claims (one partition read each)."""
    prefix = f"i:{token_id}:"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT r.idempotency_key, r.id, r.request_hash, r.created_at "
            "FROM orchestrator_runkey k "
            "JOIN orchestrator_run r ON r.id = k.run_id AND r.created_at = k.created_at "
            "WHERE k.key = ANY(%s)",
            [[prefix + key for key in keys]],
        )
        return {key: Stored(pk, digest, created) for key, pk, digest, created in cursor}
