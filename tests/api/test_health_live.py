"""/healthz and /readyz from the web server as shipped (`config.serve`, DEBUG off, one process
with one work slot) on a private PostgreSQL and a private Redis that the tests stop and start:
readiness follows the database, its migrations and the broker, within bounded time; liveness
answers whatever they do, and both answer while the only work slot is busy, for any Host.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import psycopg
import pytest

from tests.api.helpers import ok_run
from tests.conftest import require_service
from tests.services import (
    PrivatePostgres,
    PrivateRedis,
    Process,
    app_env,
    available,
    manage,
    start_web,
    wait_until,
)

# Serial: the probes' answers are timed (under 0.5 s, 3 s, 5 s).
pytestmark = [pytest.mark.slow, pytest.mark.serial]

# A load balancer's probe timeout: every answer comes well before it.
PROBE_TIMEOUT = 6.0
# Kubernetes sends the pod's address as Host, which ALLOWED_HOSTS does not list.
POD_HOST = {"Host": "10.0.0.7:8000"}


@dataclass
class Web:
    base_url: str
    env: dict[str, str]
    database_url: str
    postgres: PrivatePostgres
    redis: PrivateRedis
    server: Process
    migrated: bool = False

    def probe(self, path: str) -> tuple[httpx.Response, float]:
        began = time.monotonic()
        response = httpx.get(f"{self.base_url}{path}", headers=POD_HOST, timeout=PROBE_TIMEOUT)
        return response, time.monotonic() - began

    def migrate(self) -> None:
        if not self.migrated:
            manage(self.env, "migrate", "--noinput")
            self.migrated = True


@pytest.fixture(scope="module")
def web(tmp_path_factory) -> Iterator[Web]:
    require_service(available(), "PostgreSQL's server programs and redis-server")
    var = tmp_path_factory.mktemp("probes")
    postgres = PrivatePostgres().init()
    redis = PrivateRedis().start()
    server = None
    try:
        url = postgres.create_database("failsight_probes")
        env = app_env(url, redis.url(0), redis.url(1), var) | {"DATABASE_POOL_MAX": "4"}
        settings = {"WEB_CONCURRENCY": "1", "WEB_THREADS": "1", "WEB_QUEUE_MS": "100"}
        server, base_url = start_web(env, var / "web.log", **settings)
        yield Web(base_url, env, url, postgres, redis, server)
    finally:
        if server is not None:
            server.stop()
        redis.remove()
        postgres.remove()


def status(response: httpx.Response) -> tuple[int, dict]:
    return response.status_code, response.json()


def ready(web: Web) -> bool:
    return web.probe("/readyz")[0].status_code == 200


def test_not_ready_until_migrated_while_alive_all_along(web):
    response, _ = web.probe("/readyz")
    assert status(response) == (503, {"status": "unavailable"})
    assert status(web.probe("/healthz")[0]) == (200, {"status": "ok"})
    assert "readyz: migrations not ready" in web.server.text()
    web.migrate()
    assert status(web.probe("/readyz")[0]) == (200, {"status": "ok"})


def test_not_ready_while_the_database_is_down_and_ready_again_after(web):
    web.migrate()
    web.postgres.stop("immediate")
    try:
        timings = []
        for _ in range(3):  # the first finds the pooled connection broken, the next none
            response, took = web.probe("/readyz")
            assert status(response) == (503, {"status": "unavailable"}), response.text
            timings.append(took)
        alive, took_alive = web.probe("/healthz")
        assert alive.status_code == 200 and took_alive < 0.5
    finally:
        web.postgres.start()
    assert "readyz: database unavailable" in web.server.text()
    began = time.monotonic()
    wait_until(lambda: ready(web), 15, "ready again")
    answers = ", ".join(f"{t:.2f} s" for t in timings)
    back = time.monotonic() - began
    print(f"/readyz with the database down: {answers}; ready again {back:.1f} s after")
    assert max(timings) < 5


def test_not_ready_while_the_broker_is_down_or_hangs_within_its_timeout(web):
    web.migrate()
    web.redis.kill()
    try:
        response, refused = web.probe("/readyz")
        assert status(response) == (503, {"status": "unavailable"})
        assert web.probe("/healthz")[0].status_code == 200
    finally:
        web.redis.start()
    wait_until(lambda: ready(web), 10, "ready again")
    os.kill(web.redis.proc.pid, signal.SIGSTOP)  # connects, never answers
    try:
        response, hanging = web.probe("/readyz")
        assert status(response) == (503, {"status": "unavailable"})
    finally:
        os.kill(web.redis.proc.pid, signal.SIGCONT)
    assert "readyz: broker unavailable" in web.server.text()
    wait_until(lambda: ready(web), 10, "ready again")
    print(f"/readyz with the broker down: {refused:.2f} s; hanging: {hanging:.2f} s")
    assert refused < 3 and hanging < 3


def test_both_answer_while_the_only_work_slot_is_busy(web):
    """A report waits on a lock of the run table, holding the process's one slot: another
    request is refused (503, overloaded), the probes are not."""
    web.migrate()
    token = manage(web.env, "createtoken", "probe-test")
    headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "held"}
    with psycopg.connect(web.database_url) as lock:
        lock.execute("LOCK TABLE orchestrator_run IN EXCLUSIVE MODE")
        with httpx.Client(base_url=web.base_url, timeout=30) as held:
            sending = held.build_request("POST", "/api/v1/runs", json=ok_run(), headers=headers)
            waiting = _send_in_background(held, sending)
            wait_until(lambda: _waits_on_a_lock(web), 20, "the report to hold the slot")
            refused = httpx.get(f"{web.base_url}/api/v1/runs", headers=headers, timeout=10)
            probes = [web.probe(path)[0] for path in ("/healthz", "/readyz")]
            lock.commit()
            waiting.join(30)
    assert refused.status_code == 503 and "overloaded" in refused.text
    assert [status(p) for p in probes] == [(200, {"status": "ok"})] * 2


def _send_in_background(client: httpx.Client, request: httpx.Request) -> threading.Thread:
    thread = threading.Thread(target=client.send, args=(request,))
    thread.start()
    return thread


def _waits_on_a_lock(web: Web) -> bool:
    with psycopg.connect(web.database_url, autocommit=True) as other:
        return other.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0] > 0
