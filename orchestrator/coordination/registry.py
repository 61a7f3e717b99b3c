"""Where subagents get data: the registry of sources per capability, in order of preference.

A source is a plain callable `(query: dict) -> list[dict]` (or `(query, partial)`, appending what it
gathers to `partial` as it goes) that raises on failure. A source may declare a credential
refresher, which the coordinator calls once before retrying an auth failure. The product registers
no source of its own: the modules named by FAILSIGHT_SOURCE_MODULES fill the registry (the main
job's demonstration names its own; see the README's "Your own sources"). Where a switch goes is
read here too (`switch_target`): the capability's next untried source, else an alternative the
failed run suggested that names a registered source. Calling a source, with local recovery, is
`execution`'s job.
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

        First the next untried source of `capability` (else of every capability `source` serves),
        in order of preference; when none is left, the first of the run's suggested alternatives
        that names a registered, untried source (of any capability): "news_api", or "use
        news_api instead of web crawl". (None, False) when nothing is left. `prefer` may reorder
        a capability's untried sources (the coordinator's switch efficacy).
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


# A source name as it appears inside a sentence ("use news_api instead of web crawl."): word
# characters and hyphens, with inner dots or colons ("api.v2"), never a sentence's final period.
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
