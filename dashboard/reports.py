"""A workflow's coverage report for display. It is JSON written by another component, so it is
read defensively: anything unexpected shows as "unknown" rather than breaking the page."""

from __future__ import annotations

from typing import Any

VERDICTS = {
    "well_supported": "well supported",
    "thin": "thinly supported",
    "empty": "empty (searched, nothing found)",
    "gap": "gap",
}


def coverage_topics(coverage: Any) -> list[dict[str, Any]]:
    """[{topic, verdict, label, reason, sources, runs, extra}] in the report's order."""
    if isinstance(coverage, dict) and isinstance(coverage.get("topics"), list | dict):
        coverage = coverage["topics"]
    if isinstance(coverage, dict):
        entries = [(str(k), v) for k, v in coverage.items()]
    elif isinstance(coverage, list):
        entries = [(str(e.get("topic", "?")) if isinstance(e, dict) else "?", e) for e in coverage]
    else:
        return []
    return [_topic(name, value) for name, value in entries]


def _topic(name: str, value: Any) -> dict[str, Any]:
    data = value if isinstance(value, dict) else {"verdict": value}
    verdict = str(data.get("verdict") or data.get("status") or "unknown")
    reason = data.get("reason") or data.get("why") or data.get("gap_reason") or ""
    sources = data.get("sources") or data.get("supported_by") or []
    runs = data.get("runs") or data.get("run_ids") or []
    shown = {"topic", "verdict", "status", "reason", "why", "gap_reason", "sources", "runs"}
    return {
        "topic": name,
        "verdict": verdict if verdict in VERDICTS else "unknown",
        "label": VERDICTS.get(verdict, verdict),
        "reason": str(reason),
        "sources": [_source(s) for s in (sources if isinstance(sources, list) else [sources])],
        "runs": [r for r in runs if isinstance(r, int)] if isinstance(runs, list) else [],
        "extra": {k: v for k, v in data.items() if k not in shown | {"supported_by", "run_ids"}},
    }


def _source(entry: Any) -> dict[str, str]:
    """One source's part in a topic: its name, state and a short account of what happened."""
    if not isinstance(entry, dict):
        return {"name": str(entry), "state": "", "text": ""}
    state = str(entry.get("state", ""))
    facts = []
    if entry.get("results"):
        facts.append(f"{entry['results']} results")
    if entry.get("partial"):
        facts.append(f"{entry['partial']} partial")
    failures = entry.get("failure_types")
    if isinstance(failures, list) and failures:
        facts.append(", ".join(str(f) for f in failures))
    if entry.get("attempts"):
        facts.append(f"{entry['attempts']} attempts")
    return {"name": str(entry.get("source", "?")), "state": state, "text": " · ".join(facts)}
