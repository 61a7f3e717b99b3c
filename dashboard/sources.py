"""Per-source breaker and retry-budget state, as the coordinator reports it."""

from __future__ import annotations

from typing import Any

from orchestrator import budget


def source_states() -> list[dict[str, Any]]:
    """One dict per source: source, state, consecutive_failures, tokens, capacity, empty, label.

    The coordinator's `budget.source_states()` is the authority; its keys are read defensively so
    a renamed field shows as "unknown" rather than a 500 on the overview.
    """
    return [_normalise(s) for s in budget.source_states()]


def _normalise(s: dict[str, Any]) -> dict[str, Any]:
    state = str(s.get("state") or s.get("breaker") or s.get("breaker_state") or "unknown")
    empty = bool(s.get("empty") or s.get("budget_empty"))
    label = f"breaker {state.replace('_', '-')}" + (", budget empty" if empty else "")
    return {
        "source": str(s.get("source", "?")),
        "state": state,
        "consecutive_failures": s.get("consecutive_failures", 0),
        "tokens": s.get("tokens", s.get("budget_tokens")),
        "capacity": s.get("capacity", s.get("budget_capacity")),
        "empty": empty,
        "label": label,
    }
