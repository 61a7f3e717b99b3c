"""Where subagents get data: the registry of sources per capability, in order of preference.

A source is a plain callable `(query: dict) -> list[dict]` (or `(query, partial)`, appending what it
gathers to `partial` as it goes) that raises on failure. A source may declare a credential
refresher, which the coordinator calls once before retrying an auth failure. The product registers
no source of its own: the modules named by FAILSIGHT_SOURCE_MODULES fill the registry (the main
job's demonstration names its own; see the README's "Your own sources"). Calling a source, with
local recovery, is `execution`'s job.
"""

from __future__ import annotations

import importlib
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


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
                for path in getattr(settings, "FAILSIGHT_SOURCE_MODULES", []):
                    importlib.import_module(path).register(reg)
                _registry = reg
    return _registry


def use_registry(reg: Registry | None) -> None:
    """Replace the process's registry (tests and the recovery benchmark); None reloads it."""
    global _registry
    _registry = reg
