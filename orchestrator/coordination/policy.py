"""The routing policy as the coordinator reads it: a snapshot cached by policy version. Every
change bumps the version, so one cheap version read per decision never routes on stale rules."""

from __future__ import annotations

import functools
import threading
from typing import Any

from django.db import connection

from classifier import Classifier, Overrides
from orchestrator.coordination import routing
from orchestrator.models import PolicyState, ProjectPolicy, ProviderOverride, RoutingPolicy

_lock = threading.Lock()
_snapshots: dict[tuple, dict[int | None, routing.PolicySnapshot]] = {}
_classifiers: dict[tuple, Classifier] = {}


def _version_key() -> tuple:
    """Return the version with its change time: a rolled-back bump can never alias a cached one.
    Read for every decision and every failure classified again: a plain statement, as the ORM's
    query building would cost more CPU than the read itself. (A key only: the time is as the
    database returns it.)"""
    with connection.cursor() as cursor:
        cursor.execute(_version_sql())
        row = cursor.fetchone()
    return tuple(row) if row else (1, None)


@functools.cache
def _version_sql() -> str:
    q = connection.ops.quote_name
    table, pk = q(PolicyState._meta.db_table), q(PolicyState._meta.pk.column)
    return f"SELECT {q('version')}, {q('changed_at')} FROM {table} WHERE {pk} = 1"


def current_snapshot(project_id: int | None = None) -> routing.PolicySnapshot:
    """Return the routing table at the current version (loaded once per version and process):
    the global one, or with `project_id`'s overrides (`ProjectPolicy`) in place of its rows."""
    version = _version_key()
    snaps = _snapshots.get(version)
    if snaps is None:
        snaps = _load(version[0])
        with _lock:
            _snapshots.clear()
            _snapshots[version] = snaps
    return snaps.get(project_id) or snaps[None]


def _load(version: int) -> dict[int | None, routing.PolicySnapshot]:
    """{None: the global table, project id: that project's table} for every project overriding
    any failure type; a project overriding none reads the global one."""
    rows = [p.snapshot() for p in RoutingPolicy.objects.all()]
    by_project: dict[int, dict[str, Any]] = {}
    for override in ProjectPolicy.objects.select_related("project"):
        row = {k: v for k, v in override.snapshot().items() if k != "project"}
        by_project.setdefault(override.project_id, {})[override.failure_type] = row
    snaps: dict[int | None, routing.PolicySnapshot] = {
        None: routing.PolicySnapshot.from_rows(version, rows)
    }
    for project_id, overrides in by_project.items():
        merged = [overrides.pop(row["failure_type"], row) for row in rows]
        snaps[project_id] = routing.PolicySnapshot.from_rows(
            version, merged + list(overrides.values())
        )
    return snaps


def current_classifier() -> Classifier:
    """Return a classifier holding the enabled provider overrides of the current version."""
    return versioned_classifier()[0]


def versioned_classifier() -> tuple[Classifier, int]:
    """Return `current_classifier()` with the policy version it is of."""
    key = _version_key()
    found = _classifiers.get(key)
    if found is None:
        rows = [o.snapshot() for o in ProviderOverride.objects.filter(enabled=True)]
        found = Classifier(overrides=Overrides.from_data(rows))
        with _lock:
            _classifiers.clear()
            _classifiers[key] = found
    return found, key[0]


def announced_classifier() -> tuple[Classifier, int] | None:
    """`versioned_classifier()` without a query, when the version API answers announce
    (`PolicyState.announced_version`, remembered a few seconds) is the one cached; else None."""
    announced = PolicyState.announced_version()
    for key, found in list(_classifiers.items()):
        if key[0] == announced:
            return found, announced
    return None


def rule_of(policy: RoutingPolicy | ProjectPolicy | routing.Rule | dict[str, Any]) -> routing.Rule:
    if isinstance(policy, routing.Rule):
        return policy
    if isinstance(policy, RoutingPolicy | ProjectPolicy):
        return routing.Rule.from_data(policy.snapshot())
    return routing.Rule.from_data(policy)


def preview_delays(
    policy: RoutingPolicy | ProjectPolicy | routing.Rule | dict[str, Any],
    attempts: int | None = None,
) -> list[tuple[int, float, float]]:
    """Return (failed attempt, min_delay, max_delay) for each retry the rule allows."""
    rule = rule_of(policy)
    count = attempts if attempts is not None else max(0, rule.max_attempts - 1)
    if rule.hard_fail and attempts is None:
        return []
    return [(n, *routing.delay_bounds(rule, n)) for n in range(1, count + 1)]
