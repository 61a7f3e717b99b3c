"""Beat's ticks: the configured scheduler records them (one row per beat process), for the
System page's beat line; a beat gone a day is forgotten."""

from __future__ import annotations

from datetime import timedelta

import pytest
from celery.beat import PersistentScheduler
from django.utils import timezone

from config.celery import app
from orchestrator.beat import Scheduler, record_tick
from orchestrator.coordination.execution import lease_owner
from orchestrator.models import BeatTick

pytestmark = pytest.mark.django_db


def test_beat_runs_the_recording_scheduler():
    assert app.conf.beat_scheduler == "orchestrator.beat:Scheduler"
    assert issubclass(Scheduler, PersistentScheduler)


def test_a_tick_updates_this_process_row():
    assert record_tick()
    first = BeatTick.objects.get()
    assert first.owner == lease_owner()
    assert record_tick()
    assert BeatTick.objects.get().at > first.at


def test_a_beat_gone_a_day_is_forgotten_and_a_recent_one_kept():
    now = timezone.now()
    BeatTick.objects.create(owner="gone:1", at=now - timedelta(days=2))
    BeatTick.objects.create(owner="other:2", at=now - timedelta(minutes=1))
    assert record_tick(forget=True)
    assert set(BeatTick.objects.values_list("owner", flat=True)) == {lease_owner(), "other:2"}
