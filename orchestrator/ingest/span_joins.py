"""Spans of one trace exported in different batches, joined into the runs one export would give.

A BatchSpanProcessor exports spans as they end, so a tool call's failed HTTP span can leave in one
export and the tool span in the next (another process's exporter may even send the parent first).
Every failed span is kept (`TraceSpan`), and an export is read together with the kept spans of its
traces by the rule of one export (`spans.select`):

- a failed span whose parent has not arrived waits, OTLP_JOIN_WAIT_SECONDS at most, instead of
  becoming a run; its parent, when it comes, is one run with it as the cause;
- a late part of a stored run (a child after its parent) updates that run instead of adding one;
- past the wait, the span becomes a run of its own (`release_due`), which its parent, should it
  still come, turns into the parent's run;
- a model or tool call whose agent is not named by it nor by any ancestor here is stored at once,
  under the service's name, and kept awaiting its missing ancestor: an agent invocation arriving
  later names the agent of the run (`_unnamed`).

An export with failed or kept spans works under a lock per trace (PostgreSQL: an advisory lock;
SQLite: the write lock its transactions take at BEGIN), so exports of one trace arriving at once
on two processes join as if one came after the other.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import psycopg
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from classifier import Classifier
from orchestrator import scrubbing
from orchestrator.coordination import policy
from orchestrator.ingest import spans
from orchestrator.ingest.pipeline import Report, accept, restated
from orchestrator.ingest.spans import SpanRun, SpanView
from orchestrator.models import Run, TraceSpan

# Columns a late part does not change: who reported the run and under which key.
KEPT_COLUMNS: Final = frozenset(
    {
        "workflow_id",
        "topic",
        "capability",
        "attempt",
        "retry_of_id",
        "idempotency_key",
        "request_hash",
        "trace_id",
    }
)
RELEASE_BATCH = 500
ROW_STATE = ["awaits", "due_at", "run_id", "own_run"]


@dataclass(slots=True)
class Placement:
    """A run of an export: inserted, or written over `into` (a stored run it takes over)."""

    view: SpanView
    run: SpanRun
    into: int | None = None
    awaits: str = ""  # kept on the span's row: a released span still joins its parent
    id: int | None = None
    status: str = ""


@dataclass(slots=True)
class StoredRun:
    id: int
    item: dict[str, Any]
    status: str  # created, existing (an exporter's retry) or updated (a late part joined it)


@dataclass(slots=True)
class Export:
    runs: list[StoredRun]
    refused: list[str]


def store_export(
    token_id: int, request: ExportTraceServiceRequest, classifier: Classifier
) -> Export:
    """Store the runs of an export; return them and the spans refused, with why."""
    refused: list[str] = []
    views = _unique(spans.read_views(request, refused, scrubbing.current()), refused)
    joined = any(view.failed for view in views) or _kept_query(token_id, views).exists()
    with transaction.atomic() if joined else nullcontext():
        kept: list[TraceSpan] = []
        if joined:
            _lock(token_id, {view.trace_id for view in views})
            kept = _kept(token_id, views)
        views = _merge(views, kept, refused)
        plan = _plan(views, classifier)
        _store(token_id, plan.runs, refused)
        _keep(token_id, plan, timezone.now())
    runs = [StoredRun(p.id, p.run.item, p.status) for p in plan.runs if p.id is not None]
    return Export(runs, refused)


def _unique(views: list[SpanView], refused: list[str]) -> list[SpanView]:
    """The first of each span sent twice in one export; another content for it is refused."""
    first: dict[tuple[str, str], SpanView] = {}
    for view in views:
        seen = first.setdefault(view.key, view)
        if seen is not view and spans.digest(seen) != spans.digest(view):
            refused.append(_reused(view))
    return list(first.values())


def _reused(view: SpanView) -> str:
    return (
        f"span {view.trace_id}/{view.span_id} ({view.span.name[:100]}): already used for a "
        "different span (the one stored first stands)"
    )


def _lock(token_id: int, traces: Iterable[str]) -> None:
    if connection.vendor != "postgresql":
        return  # SQLite's transactions begin IMMEDIATE: one writer at a time
    # Sorted, so two exports sharing traces take their locks in the same order.
    keys = sorted({_lock_key(token_id, trace) for trace in traces})
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_advisory_xact_lock(k)) FROM unnest(%s::bigint[]) AS k", [keys]
        )


def _lock_key(token_id: int, trace_id: str) -> int:
    digest = hashlib.blake2b(f"otlp:{token_id}:{trace_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _kept_query(token_id: int, views: Sequence[SpanView]) -> Any:
    ids = {view.span_id for view in views}
    parents = {view.parent_id for view in views} - ids - {""}
    near = Q(span_id__in=ids) | Q(awaits__in=ids) | Q(span_id__in=parents)
    traces = {view.trace_id for view in views}
    return TraceSpan.objects.filter(near, token_id=token_id, trace_id__in=traces)


def _kept(token_id: int, views: Sequence[SpanView]) -> list[TraceSpan]:
    """The kept spans of these spans' traces that are among them, wait for one of them, or are
    their ancestors (followed up the chain)."""
    rows = {row.pk: row for row in _kept_query(token_id, views)}
    known = {view.span_id for view in views}
    for _ in range(spans.MAX_DEPTH):
        known |= {row.span_id for row in rows.values()}
        missing = {row.parent_id for row in rows.values()} - known - {""}
        if not missing:
            break
        traces = {row.trace_id for row in rows.values()}
        more = TraceSpan.objects.filter(token_id=token_id, trace_id__in=traces, span_id__in=missing)
        rows |= {row.pk: row for row in more}
        known |= missing
    # The causes of a stored run awaiting its agent: read again with it when it is rewritten.
    named = {row.run_id for row in rows.values() if row.own_run and row.awaits and row.run_id}
    if named:
        causes = TraceSpan.objects.filter(token_id=token_id, run_id__in=named, own_run=False)
        rows |= {row.pk: row for row in causes}
    return list(rows.values())


def _merge(views: list[SpanView], kept: Sequence[TraceSpan], refused: list[str]) -> list[SpanView]:
    """The export's spans and the kept ones, a span sent again read as it was kept."""
    rows = {(row.trace_id, row.span_id): row for row in kept}
    merged = []
    for view in views:
        row = rows.pop(view.key, None)
        if row is None:
            merged.append(view)
            continue
        if row.digest == spans.digest(view):
            view.kept = row
            merged.append(view)
        else:
            refused.append(_reused(view))
            merged.append(_kept_view(row))
    return merged + [_kept_view(row) for row in rows.values()]


def _kept_view(row: TraceSpan) -> SpanView:
    view = spans.view_of(bytes(row.span), bytes(row.resource))
    view.kept = row
    return view


@dataclass(slots=True)
class Plan:
    runs: list[Placement]
    holds: list[tuple[SpanView, str]]  # spans to hold, each with the ancestor it waits for
    attached: list[tuple[SpanView, int]]  # new causes of a stored run that stays as it is


def _plan(views: list[SpanView], classifier: Classifier) -> Plan:
    by_key = {view.key: view for view in views}
    plan = Plan([], [], [])
    for view in spans.select(views):
        row = view.kept
        awaited = _awaited(view, by_key)
        joining = [part for part in parts_of(view) if _joining(part)]
        if row is not None and row.run_id is not None:
            arrived = bool(row.awaits) and _unnamed(view, by_key) != row.awaits
            if row.own_run and (joining or (view.genai and arrived)):
                # A part of a stored run just arrived, or the ancestor that names its agent.
                run = spans.run_of(view, by_key, classifier)
                waits = awaited or _unnamed(view, by_key)
                plan.runs.append(Placement(view, run, into=row.run_id, awaits=waits))
            elif awaited and row.own_run:
                plan.holds.append((view, awaited))  # it waits for another ancestor now
            elif joining:  # the cause of a run read without its span: joins that run as is
                plan.attached += [(part, row.run_id) for part in joining]
        elif awaited:
            plan.holds.append((view, awaited))
        else:
            run = spans.run_of(view, by_key, classifier)
            plan.runs.append(Placement(view, run, into=_taken(view), awaits=_unnamed(view, by_key)))
    return plan


def _unnamed(view: SpanView, by_key: dict[tuple[str, str], SpanView]) -> str:
    """The missing ancestor a model or tool call's run waits for to learn its agent: "" when the
    call or an ancestor here names one, or its chain reaches the root (the service's name
    stands)."""
    if not view.genai or any(
        s.first(spans.AGENT_NAMES) for s in (view, *spans.ancestors(view, by_key))
    ):
        return ""
    return spans.missing_ancestor(view, by_key)


def _awaited(view: SpanView, by_key: dict[tuple[str, str], SpanView]) -> str:
    """The missing ancestor a failed plain span waits for, when nothing here explains it."""
    if view.genai or spans.carrier_of(view, by_key) is not None:
        return ""
    return spans.missing_ancestor(view, by_key)


def parts_of(view: SpanView) -> Iterator[SpanView]:
    for cause in view.causes:
        yield cause
        yield from parts_of(cause)


def _joining(part: SpanView) -> bool:
    """Whether a cause is new to its run: just arrived, waiting, or a run of its own until now."""
    row = part.kept
    return row is None or row.waiting or row.own_run


def _taken(view: SpanView) -> int | None:
    """The run of a cause that became a run of its own (its wait ran out): the run it explains
    takes it over, the last one to end if several did."""
    released = [p for p in parts_of(view) if p.kept is not None and p.kept.own_run]
    last = max(released, key=lambda p: p.span.end_time_unix_nano, default=None)
    return last.kept.run_id if last is not None else None


def _store(token_id: int, placements: Sequence[Placement], refused: list[str]) -> None:
    for p in placements:
        if p.into is not None:
            _update(token_id, p, refused)
    inserts = [p for p in placements if p.into is None or p.status == "gone"]
    size = settings.API_MAX_BATCH  # an export may hold more spans than one batch insert takes
    for start in range(0, len(inserts), size):
        chunk = inserts[start : start + size]
        reports = [Report(p.run.item, digest=p.run.digest) for p in chunk]
        for p, outcome in zip(chunk, accept(token_id, reports), strict=True):
            if outcome.error is not None:
                refused.append(f"{p.run.label}: {_reason(outcome.error)}")
            else:
                p.id, p.status = outcome.id, outcome.status


def _update(token_id: int, p: Placement, refused: list[str]) -> None:
    columns, errors = restated(token_id, p.run.item)
    if columns is None:
        refused.append(f"{p.run.label}: " + "; ".join(f"{e.path}: {e.message}" for e in errors))
        p.status = "refused"
        return
    fields = {k: v for k, v in columns.items() if k not in KEPT_COLUMNS}
    if Run.objects.filter(pk=p.into).update(**fields):
        p.id, p.status = p.into, "updated"
    else:
        p.status = "gone"  # deleted meanwhile (retention): inserted instead


def _reason(error: Any) -> str:
    fields = "; ".join(f"{e.path}: {e.message}" for e in error.errors[:3])
    return f"{error.detail} {fields}".strip()


def _keep(token_id: int, plan: Plan, now: datetime) -> None:
    """Write where each failed span went: its own run, the run it explains, or a wait."""
    state: dict[tuple[str, str], tuple[SpanView, dict[str, Any]]] = {}

    def put(view: SpanView, **fields: Any) -> None:
        state[view.key] = (view, fields)

    for p in plan.runs:
        if p.id is None:
            continue
        # A carrier is kept too: a late cause under one of its causes finds its way up.
        kept = p.view.kept is not None or p.awaits
        if p.view.failed or p.view.causes or p.into is not None or kept:
            put(p.view, awaits=p.awaits, due_at=None, run_id=p.id, own_run=True)
        for part in parts_of(p.view):
            put(part, awaits="", due_at=None, run_id=p.id, own_run=False)
    for part, run_id in plan.attached:
        put(part, awaits="", due_at=None, run_id=run_id, own_run=False)
    due = now + timedelta(seconds=settings.OTLP_JOIN_WAIT_SECONDS)
    for view, awaited in plan.holds:
        # Its causes wait with it, for the same ancestor.
        for held in (view, *parts_of(view)):
            row = held.kept
            if row is None:
                put(held, awaits=awaited, due_at=due)
            elif row.awaits != awaited and (row.waiting or row.own_run):
                put(held, awaits=awaited)
    new, changed = [], []
    for view, fields in state.values():
        row = view.kept or _new_row(token_id, view, now)
        for name, value in fields.items():
            setattr(row, name, value)
        (changed if view.kept is not None else new).append(row)
    _create(new)
    TraceSpan.objects.bulk_update(changed, ROW_STATE)


def _create(rows: Sequence[TraceSpan]) -> None:
    if connection.vendor != "postgresql" or not rows:
        TraceSpan.objects.bulk_create(rows)
        return
    # COPY: Django's client-side binding would quote every span's bytes into the statement.
    fields = [f for f in TraceSpan._meta.concrete_fields if not f.primary_key]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    table = connection.ops.quote_name(TraceSpan._meta.db_table)
    with (
        connection.wrap_database_errors,
        psycopg.Cursor(connection.connection) as cursor,
        cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row([getattr(row, f.attname) for f in fields])


def _new_row(token_id: int, view: SpanView, now: datetime) -> TraceSpan:
    return TraceSpan(
        token_id=token_id,
        trace_id=view.trace_id,
        span_id=view.span_id,
        parent_id=view.parent_id,
        span=view.span.SerializeToString(),
        resource=view.resource_bytes,
        digest=spans.digest(view),
        created_at=now,
    )


def release_due(now: datetime | None = None) -> int:
    """Make a run of each held span whose wait is over and whose parent never came (or the
    cause of its parent's run, stored meanwhile by another export); drop the spans kept long
    enough. Return the spans released."""
    now = now or timezone.now()
    classifier = policy.current_classifier()
    due = TraceSpan.objects.filter(run_id__isnull=True, due_at__lte=now).order_by("due_at")
    released = 0
    for token_id, trace_id in dict.fromkeys(
        due.values_list("token_id", "trace_id")[:RELEASE_BATCH]
    ):
        with transaction.atomic():
            _lock(token_id, [trace_id])
            rows = list(TraceSpan.objects.filter(token_id=token_id, trace_id=trace_id))
            released += _release(token_id, rows, classifier, now)
    keep = timedelta(seconds=settings.OTLP_JOIN_KEEP_SECONDS)
    TraceSpan.objects.filter(created_at__lt=now - keep, run_id__isnull=False).delete()
    return released


def _release(token_id: int, rows: list[TraceSpan], classifier: Classifier, now: datetime) -> int:
    views = [_kept_view(row) for row in rows]
    by_key = {view.key: view for view in views}
    plan = _plan(views, classifier)
    holds, plan.holds = plan.holds, []
    for view, awaited in holds:
        row = view.kept
        if not (row.waiting and row.due_at is not None and row.due_at <= now):
            plan.holds.append((view, awaited))
            continue
        parent = _stored_parent(token_id, view.trace_id, awaited)
        if parent is not None:  # a call that went on despite it, stored by an export of its own
            plan.attached += [(held, parent) for held in (view, *parts_of(view))]
            continue
        run = spans.run_of(view, by_key, classifier)
        plan.runs.append(Placement(view, run, awaits=awaited))
    _store(token_id, plan.runs, [])
    _keep(token_id, plan, now)
    return sum(1 for p in plan.runs if p.awaits and p.into is None and p.id is not None)


def _stored_parent(token_id: int, trace_id: str, span_id: str) -> int | None:
    """The run of span `span_id` when it is one that explains the failures under it."""
    found = Run.objects.filter(token_id=token_id, trace_id=trace_id, span_id=span_id)
    for pk, operation in found.values_list("pk", "operation")[:1]:
        if operation not in spans.AGENT_OPERATIONS:
            return pk
    return None
