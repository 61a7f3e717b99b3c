"""The running deadline, a safety net of the sweeper: a run an agent reported `running` and never
finished (its agent died, or forgot) is finished as a `timeout` failure once its token's running
timeout has passed, through the finish its agent's PATCH uses, and its workflow settles."""

from __future__ import annotations

import contextlib
import logging
from datetime import datetime

from django.db import transaction

from orchestrator.coordination import clock, dispatch
from orchestrator.coordination.workflow import RunsInFlight, finish_external
from orchestrator.models import Run

logger = logging.getLogger(__name__)


def finish_overdue_runs(now: datetime | None = None, limit: int = dispatch.SWEEP_BATCH) -> int:
    """Finish the agents' runs past their running deadline, oldest first; return how many.

    Each finish is the conditional update of `Run.finish_reported`: of two sweepers, or a
    sweeper and the agent's late PATCH, exactly one finishes a run.
    """
    now = now or clock.now()
    overdue = Run.objects.past_running_deadline(now).select_related("token", "workflow")
    finished = 0
    for run in overdue.order_by("created_at", "id")[:limit]:
        with transaction.atomic():
            if not run.finish_by_deadline(now):
                continue
            logger.warning(
                "run %s: no finish reported by its deadline; failed as a timeout", run.pk
            )
            settle(run)
            finished += 1
    return finished


def settle(run: Run) -> None:
    """Let the workflow of a run the deadline finished move on: the built-in coordinator's next
    step routes the failure; an agent's workflow is settled from its runs once none is in flight
    (as its agent's `POST /workflows/{id}/finish` would)."""
    wf = run.workflow
    if wf is None or wf.is_finished:
        return
    if wf.is_built_in:
        dispatch.step(wf.pk)
        return
    with contextlib.suppress(RunsInFlight):
        finish_external(wf.pk)
