"""Where subagents get data: the registry of sources per capability, in order of preference.

A source is a callable `(query) -> list[dict]` (or `(query, partial)`) that raises on failure; the
modules named by FAILSIGHT_SOURCE_MODULES fill the registry.
"""

from __future__ import annotations

import importlib
import inspect
import re
import threading
from collections.abc import Callable, Iterable
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

    def switch_target(
        self,
        source: str,
        tried: set[str],
        suggestions: Iterable[str] = (),
        *,
        capability: str | None = None,
        prefer: Callable[[list[str]], list[str]] | None = None,
    ) -> tuple[str | None, bool]:
        """Return (where a task that failed on `source` may switch to, whether it was suggested).

        The capability's next untried source, else a registered source the run suggested.
        """
        tried = tried | {source}
        capabilities = [capability] if capability else self.capabilities_of(source)
        for name in capabilities:
            untried = [s for s in self.sources_for(name) if s not in tried]
            if prefer is not None:
                untried = prefer(untried)
            if untried:
                return untried[0], False
        for suggestion in suggestions:
            named = next((n for n in self.names_in(suggestion) if n not in tried), None)
            if named is not None:
                return named, True
        return None, False

    def capabilities_of(self, source: str) -> list[str]:
        return [name for name, sources in self.capabilities.items() if source in sources]

    def names_in(self, text: str) -> list[str]:
        """Return the registered sources `text` is or names as words, in the order named."""
        if text in self.sources:
            return [text]
        return [word for word in _WORD.findall(text) if word in self.sources]


# A source name inside a sentence: inner dots or colons ("api.v2"), never a final period.
_WORD = re.compile(r"[\w-]+(?:[.:][\w-]+)*")


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
