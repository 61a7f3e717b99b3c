"""Exports: runs as CSV or JSON Lines, a workflow's coverage report as JSON or Markdown, and any
table of figures as CSV. Runs stream over keyset pages, never held in memory or counted."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import orjson

from orchestrator import keyset
from orchestrator.coordination import coverage
from orchestrator.models import RunQuerySet, Workflow

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
)


def iter_runs(qs: RunQuerySet, batch: int | None = None) -> Iterator[tuple[Any, ...]]:
    """Yield `RUN_COLUMNS` of every run of `qs`, newest first, one keyset page at a time."""
    batch = batch or EXPORT_BATCH
    ordered = qs.order_by("-created_at", "-id")
    after: tuple[datetime, int] | None = None
    while True:
        page = ordered if after is None else keyset.beyond(ordered, after, "created_at", True)
        rows = list(page.values_list(*RUN_COLUMNS)[:batch])
        yield from rows
        if len(rows) < batch:
            return
        last = rows[-1]
        after = (last[1], last[0])


def _cell(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return "" if value is None else value


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
        chunk.append(orjson.dumps(dict(zip(header, row, strict=True))) + b"\n")
        if len(chunk) >= 500:
            yield b"".join(chunk)
            chunk = []
    yield b"".join(chunk)


def runs_export(qs: RunQuerySet, fmt: str) -> Iterator[bytes]:
    write = csv_lines if fmt == "csv" else jsonl_lines
    return write(RUN_COLUMNS, iter_runs(qs))


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
