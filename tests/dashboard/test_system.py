"""The System page (staff only): each line read from real rows, the broker reached for real (a
dead port, the filesystem broker in a folder of the test's, Redis when there is one)."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from kombu import Queue

from config.celery import app
from orchestrator import workers
from orchestrator.beat import record_tick
from orchestrator.models import BeatTick, OutboxMessage, Run, WebhookDelivery, WorkerPulse
from tests.conftest import require_service
from tests.dashboard.conftest import ago, make_run, signed_in
from tests.orchestrator.test_worker import redis_available

pytestmark = pytest.mark.django_db

DEAD_BROKER = "redis://127.0.0.1:1/0"


@pytest.fixture(autouse=True)
def _nothing_heard() -> Iterator[None]:
    cache.delete(workers.HEARD_KEY)
    yield
    cache.delete(workers.HEARD_KEY)


@pytest.fixture
def staff_client(db) -> Client:
    return signed_in(User.objects.create_user("sam", password="staff-pass-123", is_staff=True))


@contextlib.contextmanager
def broker_at(url: str, transport: str | None = None, options: dict | None = None):
    """Point the app at another broker (Celery reads CELERY_BROKER_URL before its settings)."""
    keys = ("broker_url", "broker_transport", "broker_transport_options")
    saved = {key: app.conf[key] for key in keys}
    saved_env = os.environ.get("CELERY_BROKER_URL")
    os.environ["CELERY_BROKER_URL"] = url
    app.conf.update(
        broker_url=url, broker_transport=transport, broker_transport_options=options or {}
    )
    try:
        yield
    finally:
        app.conf.update(saved)
        if saved_env is None:
            os.environ.pop("CELERY_BROKER_URL", None)
        else:
            os.environ["CELERY_BROKER_URL"] = saved_env


def filesystem_broker(folder: Path):
    for sub in ("queue", "processed", "control"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    options = {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "processed_folder": str(folder / "processed"),
        "control_folder": str(folder / "control"),
    }
    return broker_at("filesystem://", "config.broker:Transport", options)


def send_messages(count: int, name: str | None = None) -> str:
    """Put `count` messages on a queue (the app's default one), as kombu would; return its name."""
    name = name or app.conf.task_default_queue
    with app.connection_for_write() as conn, conn.Producer() as producer:
        for n in range(count):
            producer.publish({"n": n}, routing_key=name, declare=[Queue(name)])
    return name


def page(client: Client, **params: str) -> str:
    response = client.get(reverse("dashboard:system"), params)
    assert response.status_code == 200
    return response.content.decode()


def test_only_staff_see_the_page_and_its_menu_entry(client, operator_client, staff_client):
    url = reverse("dashboard:system")
    anonymous = client.get(url)
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    assert operator_client.get(url).status_code == 403
    assert f'href="{url}"' not in operator_client.get(reverse("dashboard:overview")).text
    with broker_at(DEAD_BROKER):
        assert staff_client.get(url).status_code == 200
        assert f'href="{url}"' in staff_client.get(reverse("dashboard:overview")).text


def test_a_worker_is_gone_once_silent_past_its_interval_and_the_margin():
    seen = workers.WorkerSeen("w1@host", heard_at=1000.0, freq=2.0)
    assert seen.online(1000.0 + 2.0 + workers.HEARTBEAT_MARGIN)
    assert not seen.online(1000.0 + 2.0 + workers.HEARTBEAT_MARGIN + 0.1)
    stopped = workers.WorkerSeen("w2@host", heard_at=1000.0, stopped_at=1000.5)
    assert not stopped.online(1000.5)


def test_each_listen_adds_to_what_earlier_ones_heard_and_forgets_the_long_gone():
    now = time.time()
    old = workers.WorkerSeen("old@host", heard_at=now - workers.FORGET_SECONDS - 1)
    first = workers.WorkerSeen("a@host", heard_at=now - 10, active=1)
    workers.remember({"old@host": old, "a@host": first}, now - 10)
    again = workers.WorkerSeen("a@host", heard_at=now, active=2)
    other = workers.WorkerSeen("b@host", heard_at=now)
    kept = workers.remember({"a@host": again, "b@host": other}, now)
    assert kept == {"a@host": again, "b@host": other}
    assert workers.remembered() == (now, kept)


def test_workers_heard_show_their_last_heartbeat_and_active_tasks(staff_client):
    now = time.time()
    workers.remember(
        {
            "busy@host": workers.WorkerSeen("busy@host", heard_at=now - 1, active=2, processed=40),
            "dead@host": workers.WorkerSeen("dead@host", heard_at=now - 30),
            "done@host": workers.WorkerSeen("done@host", heard_at=now - 2, stopped_at=now - 1),
        },
        now,
    )
    with broker_at(DEAD_BROKER):
        html = page(staff_client)
    assert "The broker did not answer" in html
    assert 'data-worker="busy@host" data-online="1"' in html
    assert 'data-worker="dead@host" data-online="0"' in html and "no heartbeat for 30" in html
    assert 'data-worker="done@host" data-online="0"' in html and "warm shutdown" in html
    busy = html[html.index('data-worker="busy@host"') :]
    assert "<td>2</td>" in busy[: busy.index("</tr>")]
    assert reverse("dashboard:in_flight") in busy[: busy.index("</tr>")]
    assert reverse("admin:orchestrator_outboxmessage_changelist") in html


def test_on_the_filesystem_broker_there_is_no_worker_status_but_queues_are_counted(
    staff_client, tmp_path
):
    with filesystem_broker(tmp_path):
        name = send_messages(3)
        html = page(staff_client, listen="1")
    assert "Worker status is not available on the filesystem broker" in html
    assert f'<tr data-queue="{name}"><td><bdi>{name}</bdi></td><td>3</td>' in html
    assert "?listen=1" not in html.split('id="system"')[1][:300]  # polls, does not listen


def test_queue_depth_is_the_redis_list_length():
    url = os.environ.get("CELERY_BROKER_URL", "")
    require_service(url.startswith("redis://") and redis_available(url), "Redis")
    name = f"system-test-{uuid.uuid4().hex[:8]}"
    with broker_at(url):
        send_messages(2, name)
        try:
            depths = workers.queue_depths(workers.broker_connection(), [name, f"{name}-empty"])
        finally:
            with app.connection_for_write() as conn:
                conn.default_channel.queue_purge(name)  # Redis drops the emptied list
    assert depths == {name: 2, f"{name}-empty": 0}


def test_the_outbox_shows_its_backlog_and_oldest_message(staff_client):
    now = timezone.now()
    OutboxMessage.objects.create(
        task="t",
        created_at=now - timedelta(minutes=7),
        available_at=now,
        attempts=3,
        last_error="Connection refused",
    )
    OutboxMessage.objects.create(task="t", created_at=now, available_at=now)
    with broker_at(DEAD_BROKER):
        html = page(staff_client)
    assert "2 messages not taken by the broker yet</strong>, the oldest written 7 m ago" in html
    assert "sent 3 times: <code>Connection refused</code>" in html


def test_leases_held_and_expired(staff_client):
    now = timezone.now()
    for until in (
        now + timedelta(seconds=30),
        now - timedelta(minutes=2),
        now - timedelta(hours=1),
    ):
        make_run(status=Run.Status.RUNNING, lease_until=until, lease_owner="w:1")
    make_run(status=Run.Status.RUNNING)  # an agent's, no lease
    with broker_at(DEAD_BROKER):
        html = page(staff_client)
    expired = "<strong>2 leases expired</strong>, the oldest 1 h"
    assert f"1 run held by a worker's lease; {expired}" in html


def test_beat_ticks_are_recorded_and_a_late_or_second_beat_is_called_out(staff_client):
    with broker_at(DEAD_BROKER):
        assert "Beat has never ticked" in page(staff_client)
        assert record_tick()
        html = page(staff_client)
        assert "Beat is late" not in html and "last tick was" in html
        BeatTick.objects.update(at=ago(minutes=5))
        assert "<strong>Beat is late</strong>: its last tick was 5 m ago" in page(staff_client)
        BeatTick.objects.create(owner="elsewhere:9", at=timezone.now())
        assert record_tick()
        assert "<strong>2 beats are ticking</strong>" in page(staff_client)


def test_failing_webhook_deliveries(staff_client):
    now = timezone.now()
    url = "https://agent.example/hook"
    WebhookDelivery.objects.create(url=url, attempts=2, last_error="HTTP 500")
    WebhookDelivery.objects.create(url=url, state="failed", attempts=8, last_error="HTTP 502")
    WebhookDelivery.objects.create(url=url, attempts=1, lease_until=now - timedelta(minutes=1))
    WebhookDelivery.objects.create(url=url, state="delivered", attempts=1)
    with broker_at(DEAD_BROKER):
        html = page(staff_client)
    assert "<strong>1 failing</strong>" in html and "<strong>1 given up</strong>" in html
    assert "1 whose attempt died with its worker" in html
    changelist = reverse("admin:orchestrator_webhookdelivery_changelist")
    assert f"{changelist}?state__exact=failed" in html


def test_the_database_size_and_the_partitions_retention_dates(staff_client, settings):
    with broker_at(DEAD_BROKER):
        html = page(staff_client)
    assert ("PostgreSQL: " if connection.vendor == "postgresql" else "SQLite: ") in html
    if connection.vendor != "postgresql":
        assert "in one table" in html
        return
    from orchestrator import partitions

    start, end = sorted(partitions.ranges().values())[0]
    name = partitions.name_of(start.date())
    row = html[html.index(f'data-partition="{name}"') :]
    row = row[: row.index("</tr>")]
    dropped = (end + timedelta(days=settings.RUNS_RETENTION_DAYS)).date()
    assert f"{dropped:%Y-%m-%d}" in row and reverse("dashboard:runs") in row
    settings.RUNS_RETENTION_DAYS = 0
    with broker_at(DEAD_BROKER):
        assert ">kept</td>" in page(staff_client)


def test_htmx_gets_the_lines_and_listens_again_after_a_listen(staff_client, tmp_path):
    with broker_at(DEAD_BROKER):
        full = page(staff_client)
        fragment = staff_client.get(
            reverse("dashboard:system"), {"listen": "1"}, headers={"HX-Request": "true"}
        ).content.decode()
    assert "<html" in full and "<html" not in fragment
    assert fragment.lstrip().startswith('<div id="system"')
    assert 'hx-trigger="load"' in full  # the page listens as soon as it is shown


def test_a_worker_that_receives_nothing_while_messages_wait_is_shown_not_consuming(
    staff_client, tmp_path
):
    long_ago = timezone.now() - timedelta(minutes=5)
    WorkerPulse.objects.create(worker="stuck@host", ready_at=long_ago, received_at=long_ago)
    now = timezone.now()
    WorkerPulse.objects.create(worker="fine@host", ready_at=now, received_at=now)
    with filesystem_broker(tmp_path):
        send_messages(4)
        html = page(staff_client)
    assert 'data-consuming-worker="stuck@host" data-stalled="1"' in html
    stuck = html[html.index('data-consuming-worker="stuck@host"') :]
    stuck = stuck[: stuck.index("</li>")]
    assert "not consuming</span> since" in stuck and "5 m ago" in stuck
    assert "4 messages wait" in stuck
    assert 'data-consuming-worker="fine@host" data-stalled="0"' in html
