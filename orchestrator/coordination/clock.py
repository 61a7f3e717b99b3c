"""The coordinator's one source of time, replaceable by tests and the recovery benchmark.

Every module of `orchestrator.coordination` asks `clock.now()` and `clock.sleep()`, never the
system directly, so a simulated clock (see `simulation`) can jump to the next due run instead of
sleeping. Nothing else lives here.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    """Wall-clock time in UTC; sleeping really sleeps."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


current: Clock = SystemClock()


def now() -> datetime:
    """Return the current time of the clock in use."""
    return current.now()
