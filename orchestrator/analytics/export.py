"""Exports: runs as CSV or JSON Lines, a workflow's coverage report as JSON or Markdown, and any
table of figures as CSV. Runs stream over keyset pages, never held in memory or counted."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

import orjson

from orchestrator import keyset
from orchestrator.coordination import coverage
from orchestrator.models import Price, Run, RunQuerySet, Workflow
from orchestrator.models.prices import MICRO

EXPORT_BATCH = 2000
FORMATS = {
    "csv": "text/csv; charset=utf-8",
    "jsonl": "application/x-ndjson",
}
RUN_COLUMNS = (
    "id",
    "created_at",
    "finished_at",
    "status",
    "agent",
    "source",
    "operation",
    "workflow_id",
    "topic",
    "attempt",
    "retry_of_id",
    "switched_from_id",
    "failure_type",
    "reported_failure_type",
    "signal",
    "retryable",
    "retry_after",
    "status_code",
    "provider_code",
    "detail",
    "result_count",
    "partial_count",
    "decision",
    "decision_reason",
    "policy_version",
    "duration_ms",
    "signature",
    "trace_id",
    "span_id",
    *Run.USAGE_FIELDS,
)
# The price table's CSV: every row, each price from its effective date until the next row's.
PRICE_COLUMNS = (
    "kind",
    "name",
    "effective_from",
    "effective_until",
    *Price.VALUE_FIELDS,
)


def iter_runs(
    qs: RunQuerySet | Sequence[RunQuerySet], batch: int | None = None
) -> Iterator[tuple[Any, ...]]:
    """Yield `RUN_COLUMNS` of every run of `qs`, newest first, one keyset page at a time; `qs`
    may be parts whose union is to be exported (`scopes.visible_parts`), merged page by page."""
    batch = batch or EXPORT_BATCH
    parts = [qs] if isinstance(qs, RunQuerySet) else list(qs)
    ordered = [part.order_by("-created_at", "-id") for part in parts]
    after: tuple[datetime, int] | None = None
    while True:
        pages = [
            list(
                (
                    part if after is None else keyset.beyond(part, after, "created_at", True)
                ).values_list(*RUN_COLUMNS)[:batch]
            )
            for part in ordered
        ]
        rows = pages[0] if len(pages) == 1 else keyset.merged(pages, batch, _row_key)
        yield from rows
        if len(rows) < batch:
            return
        last = rows[-1]
        after = (last[1], last[0])


def _cell(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value.quantize(MICRO))
    return "" if value is None else value


def _json(value: Any) -> Any:
    """A cost in JSON Lines: its decimal string to the micro-unit, never a float."""
    if isinstance(value, Decimal):
        return str(value.quantize(MICRO))
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def csv_lines(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Iterator[bytes]:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    for row in rows:
        writer.writerow([_guard(_cell(v)) for v in row])
        if buffer.tell() > 64_000:
            yield buffer.getvalue().encode()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode()


def _guard(value: Any) -> Any:
    """Quote text a spreadsheet would run as a formula: an agent's detail must never become one."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def jsonl_lines(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Iterator[bytes]:
    chunk: list[bytes] = []
    for row in rows:
        chunk.append(orjson.dumps(dict(zip(header, row, strict=True)), default=_json) + b"\n")
        if len(chunk) >= 500:
            yield b"".join(chunk)
            chunk = []
    yield b"".join(chunk)


def _row_key(row: tuple[Any, ...]) -> tuple[datetime, int]:
    return row[1], row[0]  # RUN_COLUMNS' created_at and id


def runs_export(qs: RunQuerySet | Sequence[RunQuerySet], fmt: str) -> Iterator[bytes]:
    write = csv_lines if fmt == "csv" else jsonl_lines
    return write(RUN_COLUMNS, iter_runs(qs))


def price_rows(prices: Iterable[Price]) -> Iterator[tuple[Any, ...]]:
    """`PRICE_COLUMNS` of `prices` by kind, name and effective date, each one's end the next
    start of its kind and name in the whole table (empty: in effect still)."""
    starts: dict[tuple[str, str], list[datetime]] = {}
    for kind, name, start in Price.objects.values_list("kind", "name", "effective_from"):
        starts.setdefault((kind, name), []).append(start)
    for price in sorted(prices, key=lambda p: (p.kind, p.name, p.effective_from)):
        later = [s for s in starts.get((price.kind, price.name), []) if s > price.effective_from]
        yield (
            price.kind,
            price.name,
            price.effective_from,
            min(later, default=None),
            price.input_per_million,
            price.output_per_million,
            price.cached_per_million,
            price.per_call,
            price.currency,
            price.note,
        )


def prices_csv(prices: Iterable[Price] | None = None) -> Iterator[bytes]:
    """The price table (all of it by default) as CSV, amounts to the micro-unit."""
    return csv_lines(PRICE_COLUMNS, price_rows(Price.objects.all() if prices is None else prices))


def coverage_report(wf: Workflow) -> dict[str, Any]:
    """The stored coverage of a finished workflow, else the coverage so far."""
    final = wf.is_finished and bool(wf.coverage)
    return {
        "workflow": wf.pk,
        "name": wf.name,
        "status": wf.status,
        "final": final,
        "summary": wf.coverage_summary,
        "coverage": wf.coverage if final else coverage.workflow_coverage(wf),
    }


def _md(text: Any) -> str:
    out = str(text).replace("\\", "\\\\").replace("|", "\\|")
    for ch in "*_`[]<>#":
        out = out.replace(ch, "\\" + ch)
    return " ".join(out.split())


def coverage_markdown(report: dict[str, Any]) -> str:
    title = f"# Coverage of workflow {report['workflow']}: {_md(report['name'])}"
    lines = [title, "", f"Status: {report['status']}" + ("" if report["final"] else " (so far)")]
    if report["summary"]:
        lines.append(f"Summary: {_md(report['summary'])}")
    lines += [
        "",
        "| topic | verdict | results | partial results | failures |",
        "|---|---|---|---|---|",
    ]
    entries = report["coverage"] if isinstance(report["coverage"], dict) else {}
    for topic, entry in entries.items():
        failures = ", ".join(
            f"{f.get('source')}: {'/'.join(f.get('failure_types', []))}"
            for f in entry.get("failures", [])
        )
        lines.append(
            f"| {_md(topic)} | {_md(entry.get('verdict', ''))} | {entry.get('results', 0)} "
            f"| {entry.get('partial_results', 0)} | {_md(failures) or '—'} |"
        )
    lines.append("")
    for topic, entry in entries.items():
        lines += [f"## {_md(topic)}", "", _md(entry.get("why", "")), ""]
    return "\n".join(lines)
