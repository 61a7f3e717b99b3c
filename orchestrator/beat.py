"""Celery beat's scheduler as configured (`CELERY_BEAT_SCHEDULER`): Celery's own persistent
scheduler, which also records in the database when it ticks, at most every
`BEAT_TICK_RECORD_SECONDS`, so that any web process can tell whether beat is alive."""

from __future__ import annotations

import contextlib
import logging
import time
from datetime import timedelta
from typing import Any

from celery.beat import PersistentScheduler
from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

from orchestrator.coordination.execution import lease_owner
from orchestrator.models import BeatTick

logger = logging.getLogger(__name__)

FORGET_AFTER = timedelta(days=1)


class Scheduler(PersistentScheduler):
    recorded_at = float("-inf")
    forgotten = False

    def tick(self, *args: Any, **kwargs: Any) -> float:
        interval = super().tick(*args, **kwargs)
        now = time.monotonic()
        if now - self.recorded_at >= settings.BEAT_TICK_RECORD_SECONDS:
            self.recorded_at = now
            self.forgotten = record_tick(forget=not self.forgotten) or self.forgotten
        return interval


def record_tick(forget: bool = False) -> bool:
    """Record this process's tick (and, once, forget beats long gone); False if the database
    refused: beat goes on sending the schedule."""
    now = timezone.now()
    try:
        BeatTick.record(lease_owner(), now)
        if forget:
            BeatTick.forget_before(now - FORGET_AFTER)
    except DatabaseError:
        logger.warning("beat could not record its tick", exc_info=True)
        with contextlib.suppress(DatabaseError):
            connection.close()  # a broken connection is opened anew at the next tick
        return False
    return True
