"""Coverage: per topic, how well the workflow's result is supported, and why there are gaps.

Verdicts: well_supported (two sources or more), thin (one), empty (sources answered, nothing found),
gap (no source could be reached: which failures, what was attempted). A hole is never silent: every
source that failed is listed with its failure type, even under a thin or empty verdict.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from orchestrator.models import ReviewItem, Run

WELL_SUPPORTED = "well_supported"
THIN = "thin"
EMPTY = "empty"
GAP = "gap"
VERDICTS = (WELL_SUPPORTED, THIN, EMPTY, GAP)


def source_state(runs: list[Run], reviews: dict[int, ReviewItem]) -> dict[str, Any]:
    """Summarise every attempt of one topic on one source, first to last."""
    runs = sorted(runs, key=lambda r: (r.attempt, r.pk))
    last = runs[-1]
    ok = [r for r in runs if r.status == Run.Status.SUCCEEDED]
    entry: dict[str, Any] = {"source": last.source, "runs": [r.pk for r in runs]}
    if ok:
        results = sum(r.result_count for r in ok)
        entry.update(state="supported" if results else "empty", results=results, partial=0)
        return entry
    partial = sum(r.partial_count for r in runs)
    failures = [r.failure_type or "unclassified" for r in runs if r.failure_type]
    item = next((reviews[r.pk] for r in reversed(runs) if r.pk in reviews), None)
    entry.update(
        state="partial" if partial else "failed",
        results=0,
        partial=partial,
        failure_types=sorted(set(failures)) or [last.status],
        attempts=len(runs),
        attempted=last.attempted,
        detail=last.detail[:300],
        decision=last.decision,
        resolution=(item.resolution if item else ""),
    )
    if last.status == Run.Status.CANCELLED:
        entry["failure_types"] = ["cancelled by an operator"]
    return entry


def topic_coverage(
    topic: str, runs: Iterable[Run], reviews: dict[int, ReviewItem]
) -> dict[str, Any]:
    """Return the coverage entry of one topic from all its runs."""
    by_source: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_source[run.source].append(run)
    sources = [source_state(rs, reviews) for rs in by_source.values()]
    support = [s for s in sources if s["state"] in ("supported", "partial")]
    failed = [s for s in sources if s["state"] in ("partial", "failed")]
    if len(support) >= 2:
        verdict = WELL_SUPPORTED
    elif support:
        verdict = THIN
    elif any(s["state"] == "empty" for s in sources):
        verdict = EMPTY
    else:
        verdict = GAP
    return {
        "verdict": verdict,
        "sources": sources,
        "runs": sorted(pk for s in sources for pk in s["runs"]),
        "results": sum(s["results"] for s in sources),
        "partial_results": sum(s.get("partial", 0) for s in sources),
        "failures": [_failure_summary(s) for s in failed],
        "why": _why(topic, verdict, support, sources, failed),
    }


def _failure_summary(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "source": entry["source"],
        "failure_types": entry["failure_types"],
        "attempted": entry["attempted"],
        "attempts": entry["attempts"],
        "detail": entry["detail"],
        "partial_results": entry["partial"],
    }


def _why(
    topic: str,
    verdict: str,
    support: list[dict[str, Any]],
    sources: list[dict[str, Any]],
    failed: list[dict[str, Any]],
) -> str:
    failures = "; ".join(
        f"{s['source']} could not be reached ({', '.join(s['failure_types'])}"
        f"{', kept ' + str(s['partial']) + ' partial results' if s['partial'] else ''})"
        for s in failed
    )
    if verdict in (WELL_SUPPORTED, THIN):
        parts = ", ".join(
            f"{s['source']} ({s['results'] or s['partial']} "
            f"{'results' if s['results'] else 'partial results'})"
            for s in support
        )
        text = (
            f"{topic} is {'well' if verdict == WELL_SUPPORTED else 'thinly'} supported by {parts}"
        )
        return f"{text}; {failures}." if failures and verdict == THIN else f"{text}."
    if verdict == EMPTY:
        answered = ", ".join(s["source"] for s in sources if s["state"] == "empty")
        text = f"No results on {topic} were found: {answered} answered with nothing"
        return f"{text}; {failures}." if failures else f"{text}."
    if not sources:
        return f"{topic} could not be assessed: no source was tried."
    return f"{topic} could not be assessed: {failures}."


def summarise(coverage: dict[str, dict[str, Any]]) -> str:
    """One line for the workflow list: counts per verdict and the gaps named."""
    counts = {v: sum(1 for e in coverage.values() if e["verdict"] == v) for v in VERDICTS}
    head = ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in counts.items() if n)
    gaps = [t for t, e in coverage.items() if e["verdict"] == GAP]
    tail = f" (gaps: {', '.join(gaps)})" if gaps else ""
    return (head + tail)[:500] or "no topics"
