"""When each Celery worker last received a message, recorded by the worker itself
(`orchestrator.liveness`), so that a worker whose process lives on but whose consumer takes
nothing can be told from one that is merely idle."""

from __future__ import annotations

from datetime import datetime

from django.db import models


class WorkerPulseQuerySet(models.QuerySet):
    def on_host(self, host: str) -> WorkerPulseQuerySet:
        """The workers named `<name>@host` (Celery's `-n name@%h`)."""
        return self.filter(worker__endswith=f"@{host}")

    def not_receiving_since(self, when: datetime) -> WorkerPulseQuerySet:
        return self.filter(received_at__lt=when)


class WorkerPulse(models.Model):
    """One worker (its Celery node name): when its consumer became ready and when it last
    received a task message, whichever is later in `received_at`."""

    worker = models.CharField(max_length=200, unique=True)
    ready_at = models.DateTimeField()
    received_at = models.DateTimeField()

    objects = WorkerPulseQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.worker} received at {self.received_at:%Y-%m-%d %H:%M:%S}"

    @classmethod
    def ready(cls, worker: str, now: datetime) -> None:
        cls.objects.update_or_create(worker=worker, defaults={"ready_at": now, "received_at": now})

    @classmethod
    def received(cls, worker: str, now: datetime) -> None:
        # Only forward: a late write from a slower thread never moves it back.
        if not cls.objects.filter(worker=worker, received_at__lt=now).update(received_at=now):
            cls.objects.get_or_create(worker=worker, defaults={"ready_at": now, "received_at": now})
