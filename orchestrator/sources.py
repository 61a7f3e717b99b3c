"""Where subagents get data: a registry of sources per capability, and local recovery.

A source is a plain callable `(query: dict) -> list[dict]` (or `(query, partial)`, appending what it
gathers to `partial` as it goes) that raises on failure. A source may declare a credential
refresher, which the coordinator calls once before retrying an auth failure.
"""

from __future__ import annotations

import importlib
import inspect
import json
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from classifier import Failure
from classifier.envelope import failure_envelope, success_envelope

# Local recovery (brief rule 2): a couple of quick retries for blips, never a long wait in a worker.
LOCAL_RETRIES = 2
LOCAL_MAX_WAIT = 1.0
LOCAL_TYPES = ("transient", "timeout")
# Keys the coordinator adds to a query for the source's benefit; not part of "what was attempted".
INTERNAL_KEYS = ("attempt", "faults", "workflow")


@dataclass
class Source:
    name: str
    fn: Callable[..., list[dict]]
    refresher: Callable[[], None] | None = None

    def __post_init__(self) -> None:
        params = inspect.signature(self.fn).parameters
        self._wants_partial = len(params) >= 2

    def __call__(self, query: dict[str, Any], partial: list[dict]) -> list[dict]:
        if self._wants_partial:
            return list(self.fn(query, partial))
        return list(self.fn(query))


class Registry:
    """Capabilities to ordered source names, and source names to sources."""

    def __init__(self) -> None:
        self.capabilities: dict[str, list[str]] = {}
        self.sources: dict[str, Source] = {}

    def register(
        self,
        capability: str,
        name: str,
        fn: Callable[..., list[dict]],
        refresher: Callable[[], None] | None = None,
    ) -> Source:
        source = Source(name=name, fn=fn, refresher=refresher)
        self.sources[name] = source
        names = self.capabilities.setdefault(capability, [])
        if name not in names:
            names.append(name)
        return source

    def get(self, name: str) -> Source | None:
        return self.sources.get(name)

    def sources_for(self, capability: str) -> list[str]:
        return list(self.capabilities.get(capability, []))

    def next_source(self, capability: str, tried: set[str]) -> str | None:
        """Return the first source of the capability not tried yet, in order of preference."""
        return next((s for s in self.sources_for(capability) if s not in tried), None)

    def has_refresher(self, name: str) -> bool:
        source = self.get(name)
        return bool(source and source.refresher)


_registry: Registry | None = None
_registry_lock = threading.Lock()


def registry() -> Registry:
    """Return the process's registry, filled once by the modules of FAILSIGHT_SOURCE_MODULES."""
    global _registry
    if _registry is None:
        from django.conf import settings

        with _registry_lock:
            if _registry is None:
                reg = Registry()
                for path in getattr(settings, "FAILSIGHT_SOURCE_MODULES", ["orchestrator.demo"]):
                    importlib.import_module(path).register(reg)
                _registry = reg
    return _registry


def use_registry(reg: Registry | None) -> None:
    """Replace the process's registry (the recovery benchmark's simulated providers)."""
    global _registry
    _registry = reg


# ---------------------------------------------------------------------------------------------
# Calling a source with local recovery


class Clock(Protocol):
    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


@dataclass
class Outcome:
    """What one run of a subagent produced: its envelope and how many calls it took."""

    envelope: dict[str, Any]
    calls: int
    failure: Failure | None = None


def attempted_of(query: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in query.items() if k not in INTERNAL_KEYS}


def call_with_recovery(
    source: Source,
    query: dict[str, Any],
    *,
    classify: Callable[[BaseException], Failure],
    clock: Clock,
    not_before: Callable[[], datetime | None] = lambda: None,
    hold: Callable[[datetime], None] = lambda until: None,
    alternatives: list[str] | None = None,
    rng: Callable[[], float] = random.random,
) -> Outcome:
    """Call `source`, retrying a brief blip locally; return the envelope with every partial result.

    No call happens before `not_before()` (a provider's Retry-After, shared by every caller of the
    source and read again before each call); a Retry-After received here is passed to `hold`.
    """
    partial: list[dict] = []
    calls = 0
    waited_for: datetime | None = None
    while True:
        _wait_until(clock, _latest(not_before(), waited_for))
        calls += 1
        try:
            results = source(query, partial)
        except Exception as exc:  # a source may raise anything: classify it, never crash
            failure = classify(exc)
            if failure.retry_after is not None:
                waited_for = clock.now() + timedelta(seconds=failure.retry_after)
                hold(waited_for)
            if calls <= LOCAL_RETRIES and _recover_locally(failure):
                clock.sleep(min(LOCAL_MAX_WAIT, 0.25 * 2 ** (calls - 1)) * rng())
                continue
            envelope = _error_envelope(failure, query, partial, source.name, alternatives)
            return Outcome(envelope=envelope, calls=calls, failure=failure)
        return Outcome(
            envelope=success_envelope(results, attempted=attempted_of(query)), calls=calls
        )


def _recover_locally(failure: Failure) -> bool:
    category = failure.category.value
    if category in LOCAL_TYPES:
        return True
    short = failure.retry_after is not None and failure.retry_after <= LOCAL_MAX_WAIT
    return category == "rate_limited" and short


def _latest(*moments: datetime | None) -> datetime | None:
    return max((m for m in moments if m is not None), default=None)


def _wait_until(clock: Clock, moment: datetime | None) -> None:
    if moment is not None:
        clock.sleep((moment - clock.now()).total_seconds())


def _error_envelope(
    failure: Failure,
    query: dict[str, Any],
    partial: list[dict],
    source: str,
    alternatives: list[str] | None,
) -> dict[str, Any]:
    """The envelope of the failure as we classified it (with the provider's overrides)."""
    return failure_envelope(
        failure,
        attempted=attempted_of(query) | {"source": source},
        partial_results=_unique(partial),
        alternatives=[f"use {name} instead of {source}" for name in alternatives or []],
    )


def _unique(items: list[dict]) -> list[dict]:
    """Drop the duplicates a local retry gathers again, keeping the first order."""
    seen: set[str] = set()
    out = []
    for item in items:
        key = json.dumps(item, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return out
