"""Group commit: concurrent single reports of one process share one INSERT and one commit.

No timer: a report arriving alone is stored at once, and those arriving while a commit is in
flight form the next group. A waiter is answered only after the leader's commit returned.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class _Slot(Generic[Item, Result]):
    """One waiting report; its `wake` lock, released once by a leader, is the cheapest wait
    CPython has."""

    __slots__ = ("error", "item", "lead", "result", "wake")

    def __init__(self, item: Item) -> None:
        self.item = item
        self.wake = threading.Lock()
        self.wake.acquire()
        self.lead = False  # set when the previous leader hands this waiter the lead
        self.result: Result | None = None
        self.error: BaseException | None = None


class GroupCommit(Generic[Item, Result]):
    """Run `store(items) -> results` (one result per item, in order) for groups of callers."""

    def __init__(
        self, store: Callable[[Sequence[Item]], Sequence[Result]], limit: Callable[[], int]
    ):
        self._store = store
        self._limit = limit
        self._lock = threading.Lock()
        self._queue: list[_Slot[Item, Result]] = []
        self._leading = False
        self.groups = 0  # how many groups were stored (tests and benchmarks read it)

    def submit(self, item: Item) -> Result:
        """Store `item` with whatever else is waiting; return its result or raise its error."""
        slot: _Slot[Item, Result] = _Slot(item)
        with self._lock:
            self._queue.append(slot)
            lead = not self._leading
            self._leading = True
        if not lead:
            slot.wake.acquire()  # released once: stored, or handed the lead
        if lead or slot.lead:
            self._lead(slot)
        if slot.error is not None:
            raise slot.error
        return slot.result  # type: ignore[return-value]

    def _lead(self, own: _Slot[Item, Result]) -> None:
        """Store the waiting group, then hand the lead to the next waiter (if any)."""
        with self._lock:
            limit = max(1, self._limit())
            group, self._queue = self._queue[:limit], self._queue[limit:]
            self.groups += 1
        try:
            results = self._store([slot.item for slot in group])
            for slot, result in zip(group, results, strict=True):
                slot.result = result
        except BaseException as exc:  # every waiter must wake up, with the reason
            for slot in group:
                slot.error = exc
        finally:
            with self._lock:
                if self._queue:
                    self._queue[0].lead = True
                    self._queue[0].wake.release()
                else:
                    self._leading = False
            for slot in group:
                if slot is not own:
                    slot.wake.release()
