"""Overload behind the real server (gunicorn with `config.server.ThreadWorker`, PostgreSQL): a
request that waited too long for a thread gets a fast 503 with Retry-After in the envelope and is
not processed; a request whose client hung up while it waited is not processed at all.

The server has one thread. A lock on the run table (held by the test) keeps that thread busy
with a first report, so that the next request waits in the queue for as long as the test wants.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from orchestrator.models import ApiToken, Run
from tests.api.helpers import ENVELOPE_KEYS, ok_run
from tests.orchestrator.test_worker import database_url
from tests.services import Process, gunicorn_url, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


@contextlib.contextmanager
def one_thread_server(tmp_path: Path, shed_after_ms: int, under_load_ms: int = 0) -> Iterator[str]:
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "DATABASE_URL": database_url(),
        "DEBUG": "0",
        "SECRET_KEY": "test-only-secret-" + "o" * 48,
        "ALLOWED_HOSTS": "127.0.0.1",
        "FAILSIGHT_VAR_DIR": str(tmp_path),
        "API_RATE_LIMIT_PER_MINUTE": "0",
        "WEB_SHED_AFTER_MS": str(shed_after_ms),
        "WEB_SHED_UNDER_LOAD_MS": str(under_load_ms),
    }
    command = (
        "gunicorn config.wsgi --worker-class config.server.ThreadWorker"
        " --bind 127.0.0.1:0 --workers 1 --threads 1"
    )
    server = Process("web", command, env, tmp_path / "web.log").start()
    try:
        yield gunicorn_url(server)
    finally:
        server.stop()


@contextlib.contextmanager
def run_table_locked() -> Iterator[psycopg.Connection]:
    """Hold a lock that makes every INSERT into the run table wait until the block ends."""
    with psycopg.connect(database_url()) as conn:
        conn.execute("LOCK TABLE orchestrator_run IN EXCLUSIVE MODE")
        yield conn
        conn.commit()


def waiting_on_the_lock(conn: psycopg.Connection) -> bool:
    other = psycopg.connect(database_url(), autocommit=True)
    with other:
        return other.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0] > 0


def report_in_background(url: str, secret: str, key: str) -> tuple[threading.Thread, list]:
    answers: list[httpx.Response] = []

    def send() -> None:
        answers.append(post(url, secret, key))

    thread = threading.Thread(target=send)
    thread.start()
    return thread, answers


def post(url: str, secret: str, key: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {secret}", "Idempotency-Key": key}
    return httpx.post(f"{url}/api/v1/runs", json=ok_run(topic=key), headers=headers, timeout=30)


def raw_request(url: str, secret: str, key: str) -> bytes:
    parts = urlsplit(url)
    body = json.dumps(ok_run(topic=key)).encode()
    head = (
        f"POST /api/v1/runs HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
        f"Authorization: Bearer {secret}\r\nIdempotency-Key: {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def test_a_request_that_waited_too_long_gets_a_fast_503_and_is_not_processed(postgres, tmp_path):
    _, secret = ApiToken.issue("busy-agent")
    with one_thread_server(tmp_path, shed_after_ms=150) as url:
        with run_table_locked() as lock:
            first, first_answers = report_in_background(url, secret, "first")
            wait_until(lambda: waiting_on_the_lock(lock), 20, "the first report to wait")
            late, late_answers = report_in_background(url, secret, "late")
            time.sleep(0.5)  # the late one waits in the queue, well past 150 ms
            released = time.monotonic()
        late.join(10)
        answered_after = time.monotonic() - released
        first.join(10)

    assert first_answers[0].status_code == 201
    answer = late_answers[0]
    assert answer.status_code == 503, answer.text
    assert answer.headers["Retry-After"] == "1"
    body = answer.json()
    assert set(body) == ENVELOPE_KEYS
    assert body["failure_type"] == "server_fault" and body["retryable"] is True
    assert body["retry_after"] == 1.0 and "overloaded" in body["detail"]
    assert answered_after < 2.0  # at once, once a thread was free: not after a timeout
    assert set(Run.objects.values_list("topic", flat=True)) == {"first"}


@pytest.mark.parametrize(("under_load_ms", "short_wait_answer"), [(60, 503), (0, 201)])
def test_once_overloaded_a_shorter_wait_is_shed_too(
    postgres, tmp_path, under_load_ms, short_wait_answer
):
    """A request shed at the long bar (400 ms) makes the process overloaded: the next one, which
    waited ~200 ms, is shed at the short bar (WEB_SHED_UNDER_LOAD_MS); without a short bar it is
    served. A request that did not wait is served either way."""
    _, secret = ApiToken.issue("crowded-agent")
    with one_thread_server(tmp_path, shed_after_ms=400, under_load_ms=under_load_ms) as url:
        with run_table_locked() as lock:
            first, first_answers = report_in_background(url, secret, "first")
            wait_until(lambda: waiting_on_the_lock(lock), 20, "the first report to wait")
            late, late_answers = report_in_background(url, secret, "late")
            time.sleep(0.45)
            short, short_answers = report_in_background(url, secret, "short")
            time.sleep(0.2)  # the late one has waited ~650 ms, the short one ~200 ms
        for thread in (first, late, short):
            thread.join(10)
        fresh = post(url, secret, "fresh")  # nothing queued ahead of it

    assert first_answers[0].status_code == 201
    assert late_answers[0].status_code == 503
    assert short_answers[0].status_code == short_wait_answer, short_answers[0].text
    assert fresh.status_code == 201
    served = {"first", "fresh"} | ({"short"} if short_wait_answer == 201 else set())
    assert set(Run.objects.values_list("topic", flat=True)) == served


def test_a_request_whose_client_left_is_not_processed(postgres, tmp_path):
    _, secret = ApiToken.issue("impatient-agent")
    with one_thread_server(tmp_path, shed_after_ms=0) as url:  # no shedding: only the hang-up
        parts = urlsplit(url)
        with run_table_locked() as lock:
            first, first_answers = report_in_background(url, secret, "first")
            wait_until(lambda: waiting_on_the_lock(lock), 20, "the first report to wait")
            with socket.create_connection((parts.hostname, parts.port), timeout=10) as gone:
                gone.sendall(raw_request(url, secret, "gone"))
                time.sleep(0.3)  # queued behind the first; then the client gives up
        first.join(10)
        # One thread serves in order: once this answer is back, the abandoned one was handled.
        after = post(url, secret, "after")

    assert first_answers[0].status_code == 201
    assert after.status_code == 201
    assert set(Run.objects.values_list("topic", flat=True)) == {"first", "after"}
