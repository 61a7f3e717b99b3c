"""The System page against real Celery processes: the Procfile's worker on a private Redis and
the test database, seen online on the page, then stopped (SIGTERM) and killed (SIGKILL), and
seen gone within one heartbeat interval and the margin; the Procfile's beat seen ticking.
"""

from __future__ import annotations

import shutil
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connections
from django.test import Client
from django.urls import reverse

from orchestrator import workers
from orchestrator.models import BeatTick
from tests.conftest import TEST_SOURCES, require_service
from tests.dashboard.conftest import signed_in
from tests.dashboard.test_system import broker_at
from tests.orchestrator.test_worker import database_url
from tests.services import PrivateRedis, Process, app_env, procfile, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,  # seen gone within a heartbeat and REQUEST_MARGIN: a timing bound
    pytest.mark.timeout(240),
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

# A request's own time beside its listen: rendering, the database's lines, a loaded machine.
REQUEST_MARGIN = 1.5


@pytest.fixture
def redis(postgres) -> Iterator[PrivateRedis]:
    require_service(shutil.which("redis-server") is not None, "redis-server")
    server = PrivateRedis().start()
    cache.delete(workers.HEARD_KEY)
    try:
        with broker_at(server.url(0)):
            yield server
    finally:
        server.remove()
        cache.delete(workers.HEARD_KEY)


@pytest.fixture
def staff_client(redis) -> Client:
    return signed_in(User.objects.create_user("sam", password="staff-pass-123", is_staff=True))


@pytest.fixture
def start(redis, tmp_path) -> Iterator:
    """Start a line of the Procfile (its worker or beat) on the private Redis and the test
    database; every process started is stopped afterwards."""
    started: list[Process] = []
    env = app_env(database_url(), redis.url(0), redis.url(1), tmp_path) | {
        "DATABASE_POOL": "0",
        "FAILSIGHT_SOURCE_MODULES": TEST_SOURCES,
        "LOG_LEVEL": "INFO",
    }

    def run(line: str, name: str = "worker") -> Process:
        log = tmp_path / f"{name}.log"
        process = Process(name, procfile()[line], env | {"CELERY_WORKER_NAME": name}, log)
        started.append(process.start())
        if line == "worker":
            wait_until(lambda: "ready." in process.text(), 90, f"{name} to be ready")
        return process

    yield run
    for process in started:
        process.stop()
    connections.close_all()


def listen(client: Client) -> str:
    response = client.get(reverse("dashboard:system"), {"listen": "1"})
    assert response.status_code == 200
    return response.content.decode()


def row(html: str, hostname: str) -> str:
    if f'data-worker="{hostname}"' not in html:
        return ""
    found = html[html.index(f'data-worker="{hostname}"') :]
    return found[: found.index("</tr>")]


def online(html: str, hostname: str) -> bool:
    return 'data-online="1"' in row(html, hostname)


def gone(html: str, hostname: str) -> bool:
    return 'data-online="0"' in row(html, hostname)


def worker_name(name: str) -> str:
    return f"{name}@{socket.gethostname()}"


def test_a_worker_is_seen_then_seen_gone_within_a_heartbeat_when_stopped_or_killed(
    staff_client, start
):
    first = worker_name("first")
    process = start("worker", "first")
    wait_until(lambda: online(listen(staff_client), first), 30, "the worker to be heard")
    for _ in range(3):  # a live worker stays online listen after listen
        html = listen(staff_client)
        assert online(html, first), row(html, first)
    assert "<td>0</td>" in row(html, first)  # no task running

    # SIGTERM while the page listens: the worker says it goes (its warm shutdown).
    answers: list[tuple[str, float]] = []
    page = threading.Thread(target=lambda: answers.append((listen(staff_client), time.time())))
    page.start()
    time.sleep(1)
    stopped_at = time.time()
    process.proc.send_signal(signal.SIGTERM)
    page.join(30)
    html, answered_at = answers[0]
    assert gone(html, first), row(html, first)
    assert "warm shutdown" in row(html, first)
    assert answered_at - stopped_at <= workers.LISTEN_SECONDS + REQUEST_MARGIN

    # SIGKILL, worker and pool: nothing is said; its heartbeats stop.
    second = worker_name("second")
    process = start("worker", "second")
    wait_until(lambda: online(listen(staff_client), second), 30, "the second worker")
    killed_at = time.time()
    process.kill(signal.SIGKILL)
    html = listen(staff_client)
    seen_gone_after = time.time() - killed_at
    assert gone(html, second), row(html, second)
    assert "no heartbeat for" in row(html, second)
    assert seen_gone_after <= workers.LISTEN_SECONDS + REQUEST_MARGIN, seen_gone_after
    print(f"SIGTERM: gone {answered_at - stopped_at:.2f} s after; SIGKILL: {seen_gone_after:.2f} s")
    assert 'id="no-worker"' in html


def test_the_procfile_beat_records_its_ticks(staff_client, start, tmp_path: Path):
    start("beat", "beat")
    wait_until(lambda: BeatTick.objects.exists(), 60, "beat to record a tick")
    html = staff_client.get(reverse("dashboard:system")).content.decode()
    assert "last tick was" in html and "Beat is late" not in html
