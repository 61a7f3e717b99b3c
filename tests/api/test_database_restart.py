"""A PostgreSQL restart under load, behind the web server as shipped (`config.serve`, the pooled
connections of production) on a private cluster that the test stops and starts.

While it is down reports may fail (a 503 envelope); once it accepts connections again, none may:
40 sequential and 100 concurrent reports are all stored, and every report the server
acknowledged is stored exactly once (each carries its own Idempotency-Key).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import psycopg
import pytest

from tests.api.helpers import ok_run
from tests.conftest import require_service
from tests.services import PrivatePostgres, app_env, available, manage, start_web, wait_until

# Serial: a restart under 140 reports with a client's 30 s timeout, none of which may fail.
pytestmark = [pytest.mark.slow, pytest.mark.serial]


@dataclass
class Web:
    base_url: str
    token: str
    postgres: PrivatePostgres
    database_url: str


@dataclass
class Ledger:
    """Every report sent, by Idempotency-Key: the status it got (0 for no answer)."""

    statuses: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, key: str, status: int) -> None:
        with self.lock:
            self.statuses[key] = status

    def acknowledged(self) -> set[str]:
        return {key for key, status in self.statuses.items() if status == 201}


@pytest.fixture(scope="module")
def web(tmp_path_factory) -> Iterator[Web]:
    require_service(available(), "PostgreSQL's server programs and redis-server")
    var = tmp_path_factory.mktemp("database-restart")
    postgres = PrivatePostgres().init()
    server = None
    try:
        database_url = postgres.create_database("failsight_restart")
        # No broker is needed for reports; the cache is local memory (throttle per process).
        env = app_env(database_url, "redis://127.0.0.1:1/0", "", var)
        # A generous queue bar: on a loaded machine the admission could shed a report with a 503,
        # which this test would count as a failure the restart did not cause.
        env |= {"API_RATE_LIMIT_PER_MINUTE": "0", "WEB_QUEUE_MS": "5000"}
        manage(env, "migrate", "--noinput")
        token = manage(env, "createtoken", "restart-test")
        server, url = start_web(env, var / "web.log")
        yield Web(url, token, postgres, database_url)
    finally:
        if server is not None:
            server.stop()
        postgres.remove()


def report(client: httpx.Client, web: Web, ledger: Ledger, label: str) -> int:
    key = f"{label}-{uuid.uuid4().hex}"
    headers = {"Authorization": f"Bearer {web.token}", "Idempotency-Key": key}
    try:
        status = client.post("/api/v1/runs", json=ok_run(topic=label), headers=headers).status_code
    except httpx.HTTPError:
        status = 0
    ledger.note(key, status)
    return status


def load(web: Web, ledger: Ledger, stop: threading.Event, label: str) -> None:
    with httpx.Client(base_url=web.base_url, timeout=30) as client:
        for _ in range(5000):  # bounded; stopped long before
            if stop.is_set():
                return
            report(client, web, ledger, label)


def accepts_connections(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return False
    return True


def stop_loaders(stop: threading.Event, loaders: list[threading.Thread]) -> None:
    stop.set()
    for thread in loaders:
        thread.join(60)


def stored_per_key(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT idempotency_key, count(*) FROM orchestrator_run GROUP BY idempotency_key"
        ).fetchall()
    return dict(rows)


@pytest.mark.parametrize(
    "load_through_restart",
    [True, False],
    ids=["while-reports-arrive", "after-a-quiet-moment"],
)
def test_no_report_fails_once_a_restarted_database_is_back(web, load_through_restart):
    """Reports arrive from four clients; the restart comes while they go on, or just after they
    stop (the pools then hold only connections the restart broke, none replaced meanwhile)."""
    ledger = Ledger()
    stop = threading.Event()
    loaders = [
        threading.Thread(target=load, args=(web, ledger, stop, f"load-{n}")) for n in range(4)
    ]
    for thread in loaders:
        thread.start()
    try:
        wait_until(lambda: len(ledger.acknowledged()) >= 40, 60, "reports under load")
        if not load_through_restart:
            stop_loaders(stop, loaders)
        web.postgres.stop("fast")  # every pooled connection is closed by the server
        web.postgres.start()
        wait_until(lambda: accepts_connections(web.database_url), 30, "PostgreSQL to accept")
    finally:
        stop_loaders(stop, loaders)

    after = Ledger()
    with httpx.Client(base_url=web.base_url, timeout=30) as client:
        sequential = [report(client, web, after, "sequential") for _ in range(40)]
    with (
        ThreadPoolExecutor(max_workers=10) as pool,
        httpx.Client(
            base_url=web.base_url, timeout=30, limits=httpx.Limits(max_connections=10)
        ) as client,
    ):
        concurrent = list(pool.map(lambda _: report(client, web, after, "concurrent"), range(100)))

    failures = [status for status in sequential + concurrent if status != 201]
    assert failures == [], f"{len(failures)} of 140 failed after the restart: {failures}"
    stored = stored_per_key(web.database_url)
    acknowledged = ledger.acknowledged() | after.acknowledged()
    assert all(stored.get(key) == 1 for key in acknowledged), {
        key: stored.get(key) for key in acknowledged if stored.get(key) != 1
    }
    unanswered = set(ledger.statuses) - ledger.acknowledged()
    assert all(stored.get(key, 0) <= 1 for key in unanswered)
    during = sorted(status for status in ledger.statuses.values() if status != 201)
    print(f"under load: {len(ledger.statuses)} reports, not stored around the restart: {during}")
