"""Overload behind the real server (gunicorn with `config.server.ThreadWorker`, PostgreSQL): a
request that waited too long for a thread gets a fast 503 with Retry-After in the envelope and is
not processed; a request whose client hung up while it waited is not processed at all.

The server has one thread. A lock on the run table (held by the test) keeps that thread busy
with a first report, so that the next request waits in the queue for as long as the test wants.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from orchestrator.models import ApiToken, Run
from tests.api.helpers import ENVELOPE_KEYS, ok_run, web_env
from tests.orchestrator.test_worker import database_url
from tests.services import Process, gunicorn_url, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


@contextlib.contextmanager
def one_thread_server(tmp_path: Path, shed_after_ms: int, under_load_ms: int = 0) -> Iterator[str]:
    env = web_env(
        tmp_path,
        WEB_SHED_AFTER_MS=str(shed_after_ms),
        WEB_SHED_UNDER_LOAD_MS=str(under_load_ms),
    )
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


def raw_request(url: str, secret: str, key: str, *, close: bool = False) -> bytes:
    parts = urlsplit(url)
    body = json.dumps(ok_run(topic=key)).encode()
    head = (
        f"POST /api/v1/runs HTTP/1.1\r\nHost: {parts.hostname}:{parts.port}\r\n"
        f"Authorization: Bearer {secret}\r\nIdempotency-Key: {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        + ("Connection: close\r\n" if close else "")
        + "\r\n"
    )
    return head.encode() + body


class RawConnection:
    """One keep-alive connection, requests written and answers read by hand: what a client sees
    of the connection itself (kept or closed) after a refusal."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=10)
        self.buffer = b""

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def _fill(self, size: int) -> None:
        while len(self.buffer) < size:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buffer += chunk

    def answer(self) -> tuple[int, dict[str, str], bytes]:
        """The next response: status, headers (lower-cased names), body."""
        while b"\r\n\r\n" not in self.buffer:
            self._fill(len(self.buffer) + 1)
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        self._fill(length)
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(status_line.split()[1]), headers, body

    def closed_by_server(self) -> bool:
        return self.sock.recv(1) == b""


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


def refusals_logged(tmp_path) -> int:
    """How many requests the worker's log says were refused waiting for a thread, in all."""
    log = (tmp_path / "web.log").read_text()
    lines = re.findall(r"refused \d+ requests before parsing .* (\d+) waiting for a thread", log)
    return sum(map(int, lines))


def test_a_refused_request_is_answered_before_parsing_and_its_connection_kept(postgres, tmp_path):
    """A request that waited past the bar is read off its socket and refused by the web worker
    itself (it says so in its log); the 503 is the one Shedding writes, and the connection goes
    on: the client's next request on it is served."""
    _, secret = ApiToken.issue("patient-agent")
    with one_thread_server(tmp_path, shed_after_ms=150) as url, RawConnection(url) as late:
        with run_table_locked() as lock:
            first, first_answers = report_in_background(url, secret, "first")
            wait_until(lambda: waiting_on_the_lock(lock), 20, "the first report to wait")
            late.sock.sendall(raw_request(url, secret, "late"))
            time.sleep(0.5)
        status, headers, body = late.answer()
        late.sock.sendall(raw_request(url, secret, "again"))
        again = late.answer()
        first.join(10)
        # Logged at once, or (when a readiness probe refused while the worker booted took that)
        # by the worker's heartbeat within about a second.
        wait_until(lambda: refusals_logged(tmp_path) >= 1, 5, "the refusal to be logged")
        log = (tmp_path / "web.log").read_text()

    assert first_answers[0].status_code == 201
    assert status == 503, body
    assert headers["retry-after"] == "1" and headers["connection"] == "keep-alive"
    assert headers["content-type"] == "application/json" and "date" in headers
    envelope = json.loads(body)
    assert set(envelope) == ENVELOPE_KEYS and envelope["failure_type"] == "server_fault"
    assert "this request waited" in envelope["detail"]
    assert envelope["attempted"] == {"operation": "POST /api/v1/runs"}
    # At least the late one (a readiness probe sent while the worker booted may be counted too).
    assert refusals_logged(tmp_path) >= 1, log
    assert again[0] == 201, again
    assert set(Run.objects.values_list("topic", flat=True)) == {"first", "again"}


def test_a_refused_client_that_asked_to_close_is_closed(postgres, tmp_path):
    _, secret = ApiToken.issue("closing-agent")
    with one_thread_server(tmp_path, shed_after_ms=150) as url, RawConnection(url) as late:
        with run_table_locked() as lock:
            first, _ = report_in_background(url, secret, "first")
            wait_until(lambda: waiting_on_the_lock(lock), 20, "the first report to wait")
            late.sock.sendall(raw_request(url, secret, "late", close=True))
            time.sleep(0.5)
        status, headers, _ = late.answer()
        first.join(10)
        assert status == 503 and headers["connection"] == "close"
        assert late.closed_by_server()


def test_while_overloaded_a_newcomer_behind_a_standing_queue_is_refused_at_the_door(
    postgres, tmp_path
):
    """Overloaded (a request was just shed), with the oldest queued request past the short bar,
    a new request is refused by the worker's loop at once: its 503 comes while the only thread
    is still held, and its connection serves the next request once the queue has drained."""
    _, secret = ApiToken.issue("crowded-agent")
    with one_thread_server(tmp_path, shed_after_ms=400, under_load_ms=60) as url:
        with run_table_locked() as lock:
            first, first_answers = report_in_background(url, secret, "first")
            wait_until(lambda: waiting_on_the_lock(lock), 20, "the first report to wait")
            late, late_answers = report_in_background(url, secret, "late")
            time.sleep(0.5)
        first.join(10)
        late.join(10)  # shed at the long bar: the process is now overloaded for a second
        with run_table_locked() as lock, RawConnection(url) as newcomer:
            second, second_answers = report_in_background(url, secret, "second")
            wait_until(lambda: waiting_on_the_lock(lock), 20, "the second report to wait")
            queued, queued_answers = report_in_background(url, secret, "queued")
            time.sleep(0.15)  # the queued one is past the short bar
            newcomer.sock.sendall(raw_request(url, secret, "newcomer"))
            status, _, body = newcomer.answer()  # the thread is still held: only the door answers
            assert waiting_on_the_lock(lock)
            lock.commit()
            second.join(10)
            queued.join(10)
            time.sleep(0.2)  # the queue has drained
            newcomer.sock.sendall(raw_request(url, secret, "after"))
            after = newcomer.answer()

    assert [first_answers[0].status_code, late_answers[0].status_code] == [201, 503]
    assert status == 503
    assert "requests ahead of this one have waited" in json.loads(body)["detail"]
    assert second_answers[0].status_code == 201
    assert queued_answers[0].status_code == 503
    assert after[0] == 201, after
    assert set(Run.objects.values_list("topic", flat=True)) == {"first", "second", "after"}
