"""A small per-process memo with a time to live, for lookups every API request repeats (the
token behind a bearer secret); other processes see a change when their entry expires."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")

clock = time.monotonic

_MISSING = object()


class LocalMemo(Generic[V]):
    """Remember `load(key)` for `ttl()` seconds (0: not at all); at most `size` keys."""

    def __init__(self, ttl: Callable[[], float], size: int = 1024) -> None:
        self._ttl = ttl
        self._size = size
        self._entries: dict[Hashable, tuple[float, V]] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, load: Callable[[], V]) -> V:
        ttl = self._ttl()
        if ttl <= 0:
            return load()
        now = clock()
        entry = self._entries.get(key, _MISSING)
        if entry is not _MISSING and entry[0] > now:  # type: ignore[index]
            return entry[1]  # type: ignore[index]
        value = load()
        with self._lock:
            if len(self._entries) >= self._size:
                self._entries.clear()  # a flood of unknown secrets must not grow memory
            self._entries[key] = (now + ttl, value)
        return value

    def forget(self) -> None:
        with self._lock:
            self._entries.clear()
