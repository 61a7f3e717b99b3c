"""Driving the coordinator synchronously in one process, with a simulated clock that jumps to the
next due run: fast tests and the recovery benchmark."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Min

from orchestrator.coordination import clock as clock_module
from orchestrator.coordination import dispatch, execution, workflow
from orchestrator.models import OutboxMessage, Run


class SimClock:
    def __init__(self, start: datetime) -> None:
        self.t = start

    def now(self) -> datetime:
        return self.t

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.t += timedelta(seconds=seconds)

    def advance_to(self, moment: datetime) -> None:
        self.t = max(self.t, moment)


class InlineDispatcher:
    def __init__(self) -> None:
        self.runs: deque[int] = deque()
        self.steps: deque[tuple[int, int | None]] = deque()
        self.others: deque[tuple[str, list[Any]]] = deque()

    def send(self, task: str, args: list[Any]) -> None:
        if task == dispatch.RUN_TASK:
            self.runs.append(args[0])
        elif task == dispatch.STEP_TASK:
            self.steps.append((args[0], args[1] if len(args) > 1 else None))
        else:
            self.others.append((task, args))


@contextlib.contextmanager
def simulated(start: datetime):
    """Swap the coordinator's clock and dispatcher for simulated ones for the block's duration."""
    old = clock_module.current, dispatch.dispatcher
    clock, disp = SimClock(start), InlineDispatcher()
    clock_module.current, dispatch.dispatcher = clock, disp
    try:
        yield clock, disp
    finally:
        clock_module.current, dispatch.dispatcher = old


def drive(
    clock: SimClock,
    disp: InlineDispatcher,
    *,
    commit: Callable[[], Any] = contextlib.nullcontext,
    run_clock: Callable[[int], Any] | None = None,
    max_events: int = 100_000,
) -> int:
    """Run steps and runs until nothing is left to do; return how many events ran.

    `commit` wraps each event: a test's transaction never commits.
    """
    events = 0
    while events < max_events:
        if disp.steps:
            with commit():
                workflow.step(*disp.steps.popleft())
        elif disp.runs:
            pk = disp.runs.popleft()
            with commit():
                execution.execute_run(pk, run_clock=run_clock(pk) if run_clock else clock)
        elif unsent := list(OutboxMessage.objects.values_list("pk", flat=True)):
            with commit():
                dispatch.relay(unsent)
        else:
            queued = Run.objects.filter(status=Run.Status.QUEUED, workflow__isnull=False)
            due = queued.aggregate(t=Min("due_at"))["t"]
            if due is None:
                return events
            clock.advance_to(due)
            with commit():
                if not dispatch.dispatch_due(clock.now()):
                    return events
        events += 1
    raise RuntimeError("the simulation did not settle")
