"""Coverage: per topic, how well the workflow's result is supported, and why there are gaps.
A hole is never silent: every source that failed is named in the sentence, whatever the verdict."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from orchestrator.models import ReviewItem, Run, Workflow
from orchestrator.vocabulary import FailureCategory, Vocabulary


class Verdict(Vocabulary):
    """How well one topic of a workflow's result is supported. A failed call's partial results
    are never support: they can make a topic thin, never well supported."""

    WELL_SUPPORTED = "well_supported"  # two sources or more answered with results
    THIN = "thin"  # one source answered with results, or only failed calls' partial results
    EMPTY = "empty"  # the sources answered and found nothing: not a failure
    GAP = "gap"  # no source could be reached


def source_state(runs: list[Run], reviews: dict[int, ReviewItem]) -> dict[str, Any]:
    runs = sorted(runs, key=lambda r: (r.attempt, r.pk))
    last = runs[-1]
    ok = [r for r in runs if r.status == Run.Status.SUCCEEDED]
    entry: dict[str, Any] = {"source": last.source, "runs": [r.pk for r in runs]}
    if ok:
        results = sum(r.result_count for r in ok)
        entry.update(state="supported" if results else "empty", results=results, partial=0)
        return entry
    partial = sum(r.partial_count for r in runs)
    failures = [r.failure_type for r in runs if r.failure_type]
    item = next((reviews[r.pk] for r in reversed(runs) if r.pk in reviews), None)
    entry.update(
        state="partial" if partial else "failed",
        results=0,
        partial=partial,
        partial_calls=sum(1 for r in runs if r.partial_count),
        failure_types=sorted(set(failures)) or [last.status],
        last_failure_type=last.failure_type or "",
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
    by_source: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_source[run.source].append(run)
    sources = [source_state(rs, reviews) for rs in by_source.values()]
    support = [s for s in sources if s["state"] == "supported"]
    failed = [s for s in sources if s["state"] in ("partial", "failed")]
    if len(support) >= 2:
        verdict = Verdict.WELL_SUPPORTED
    elif support or any(s["state"] == "partial" for s in sources):
        verdict = Verdict.THIN
    elif any(s["state"] == "empty" for s in sources):
        verdict = Verdict.EMPTY
    else:
        verdict = Verdict.GAP
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
    failures = "; ".join(map(_failed_source, failed))
    if support:
        parts = ", ".join(f"{s['source']} ({_count(s['results'], 'result')})" for s in support)
        how = "well" if verdict == Verdict.WELL_SUPPORTED else "thinly"
        text = f"{topic} is {how} supported by {parts}"
    elif verdict == Verdict.THIN:
        partial = sum(s["partial"] for s in failed)
        calls = sum(s["partial_calls"] for s in failed)
        text = f"{topic} is thin: {_count(partial, 'partial result')} from " + (
            "a failed call" if calls == 1 else f"{calls} failed calls"
        )
    elif verdict == Verdict.EMPTY:
        answered = ", ".join(s["source"] for s in sources if s["state"] == "empty")
        text = f"No results on {topic} were found: {answered} answered with nothing"
    elif not sources:
        return f"{topic} could not be assessed: no source was tried."
    else:
        return f"{topic} could not be assessed: {failures}."
    return f"{text}; {failures}." if failures else f"{text}."


def _failed_source(entry: dict[str, Any]) -> str:
    """What became of a source that never answered: not found there (a 404: it was reached), or
    it could not be reached, with the failure types and what its failed calls gathered."""
    kinds = ", ".join(entry["failure_types"])
    kept = f", kept {_count(entry['partial'], 'partial result')}" if entry["partial"] else ""
    if entry["last_failure_type"] == FailureCategory.RESOURCE_MISSING:
        return f"not found at {entry['source']} ({kinds}{kept})"
    return f"{entry['source']} could not be reached ({kinds}{kept})"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def summarise(coverage: dict[str, dict[str, Any]]) -> str:
    counts = {v: sum(1 for e in coverage.values() if e["verdict"] == v) for v in Verdict}
    head = ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in counts.items() if n)
    gaps = [t for t, e in coverage.items() if e["verdict"] == Verdict.GAP]
    tail = f" (gaps: {', '.join(gaps)})" if gaps else ""
    return (head + tail)[:500] or "no topics"


def workflow_coverage(wf: Workflow, runs: Iterable[Run] | None = None) -> dict[str, Any]:
    runs = list(wf.runs.all() if runs is None else runs)
    reviews = {i.run_id: i for i in ReviewItem.objects.filter(workflow=wf)}
    by_topic: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        by_topic[run.topic].append(run)
    topics = list(wf.topics) or list(by_topic)
    return {t: topic_coverage(t, by_topic.get(t, []), reviews) for t in topics}


def final_status(cov: dict[str, Any], runs: list[Run]) -> str:
    """failed: every source failed; degraded: a gap, a failed empty, partial-only support."""
    anything = any(r.status == Run.Status.SUCCEEDED for r in runs) or any(
        e["partial_results"] for e in cov.values()
    )
    if not anything:
        return Workflow.Status.FAILED
    degraded = any(map(_degraded, cov.values()))
    return Workflow.Status.DEGRADED if degraded else Workflow.Status.SUCCEEDED


def _degraded(entry: dict[str, Any]) -> bool:
    if entry["verdict"] == Verdict.GAP:
        return True
    if entry["verdict"] == Verdict.EMPTY:
        return bool(entry["failures"])
    return entry["results"] == 0
