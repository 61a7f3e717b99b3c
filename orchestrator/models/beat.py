"""Celery beat's ticks, recorded by its scheduler (`orchestrator.beat`) for the System page."""

from __future__ import annotations

from datetime import datetime

from django.db import models


class BeatTickQuerySet(models.QuerySet):
    def since(self, when: datetime) -> BeatTickQuerySet:
        """The beat processes that ticked since `when`, the latest first."""
        return self.filter(at__gte=when).order_by("-at")


class BeatTick(models.Model):
    """When one beat process (host:pid) last ran its schedule. One beat belongs in a cluster:
    two rows ticking at once mean every periodic task is sent twice."""

    owner = models.CharField(max_length=200, unique=True)
    at = models.DateTimeField()

    objects = BeatTickQuerySet.as_manager()

    def __str__(self) -> str:
        return f"beat {self.owner} at {self.at:%Y-%m-%d %H:%M:%S}"

    @classmethod
    def record(cls, owner: str, now: datetime) -> None:
        if not cls.objects.filter(owner=owner).update(at=now):
            cls.objects.get_or_create(owner=owner, defaults={"at": now})

    @classmethod
    def forget_before(cls, when: datetime) -> int:
        """Delete the rows of beats gone since before `when` (each restart adds one)."""
        return cls.objects.filter(at__lt=when).delete()[0]
