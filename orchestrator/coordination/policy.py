"""The routing policy as the coordinator reads it: a snapshot cached by policy version. Every
change bumps the version, so one cheap version read per decision never routes on stale rules."""

from __future__ import annotations

import threading
from typing import Any

from classifier import Classifier, Overrides
from orchestrator.coordination import routing
from orchestrator.models import PolicyState, ProviderOverride, RoutingPolicy

_lock = threading.Lock()
_snapshots: dict[tuple, routing.PolicySnapshot] = {}
_classifiers: dict[tuple, Classifier] = {}


def _version_key() -> tuple:
    """Return the version with its change time: a rolled-back bump can never alias a cached one."""
    row = PolicyState.objects.filter(pk=1).values_list("version", "changed_at").first()
    return row or (1, None)


def current_snapshot() -> routing.PolicySnapshot:
    """Return the routing table at the current version (loaded once per version and process)."""
    key = _version_key()
    snap = _snapshots.get(key)
    if snap is None:
        rows = [p.snapshot() for p in RoutingPolicy.objects.all()]
        snap = routing.PolicySnapshot.from_rows(key[0], rows)
        with _lock:
            _snapshots.clear()
            _snapshots[key] = snap
    return snap


def current_classifier() -> Classifier:
    """Return a classifier holding the enabled provider overrides of the current version."""
    key = _version_key()
    found = _classifiers.get(key)
    if found is None:
        rows = [o.snapshot() for o in ProviderOverride.objects.filter(enabled=True)]
        found = Classifier(overrides=Overrides.from_data(rows))
        with _lock:
            _classifiers.clear()
            _classifiers[key] = found
    return found


def rule_of(policy: RoutingPolicy | routing.Rule | dict[str, Any]) -> routing.Rule:
    if isinstance(policy, routing.Rule):
        return policy
    if isinstance(policy, RoutingPolicy):
        return routing.Rule.from_data(policy.snapshot())
    return routing.Rule.from_data(policy)


def preview_delays(
    policy: RoutingPolicy | routing.Rule | dict[str, Any], attempts: int | None = None
) -> list[tuple[int, float, float]]:
    """Return (failed attempt, min_delay, max_delay) for each retry the rule allows."""
    rule = rule_of(policy)
    count = attempts if attempts is not None else max(0, rule.max_attempts - 1)
    if rule.hard_fail and attempts is None:
        return []
    return [(n, *routing.delay_bounds(rule, n)) for n in range(1, count + 1)]
