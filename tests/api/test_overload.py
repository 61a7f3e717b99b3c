"""Overload behind the web server as shipped (`config.serve`, PostgreSQL): a process works on
WEB_THREADS requests at once; a newcomer that finds no slot free within WEB_QUEUE_MS gets a 503
with Retry-After in the envelope and is not processed, its connection kept for its next request.

The server here has one slot. A lock on the run table (held by the test) keeps that slot busy
with a first report for as long as the test wants.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from orchestrator.api import overload
from orchestrator.api.overload import Admission
from orchestrator.models import ApiToken, Run
from tests.api.helpers import ENVELOPE_KEYS, ok_run, web_env
from tests.orchestrator.test_worker import database_url
from tests.services import start_web, wait_until


@contextlib.contextmanager
def one_slot_server(tmp_path: Path, queue_ms: int) -> Iterator[str]:
    settings = {"WEB_CONCURRENCY": "1", "WEB_THREADS": "1", "WEB_QUEUE_MS": str(queue_ms)}
    server, url = start_web(web_env(tmp_path), tmp_path / "web.log", **settings)
    try:
        yield url
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


@pytest.mark.slow
@pytest.mark.serial  # pg_locks is read cluster-wide; WEB_QUEUE_MS is a timing
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_request_finding_no_slot_gets_a_503_and_is_not_processed(postgres, tmp_path):
    """While the only slot is held, the next report is refused (503 in the envelope, Retry-After)
    before the slot comes free, and its connection serves the client's next request."""
    _, secret = ApiToken.issue("busy-agent")
    with one_slot_server(tmp_path, queue_ms=100) as url, RawConnection(url) as late:
        with run_table_locked() as lock:
            first, first_answers = report_in_background(url, secret, "first")
            wait_until(lambda: waiting_on_the_lock(lock), 20, "the first report to wait")
            late.sock.sendall(raw_request(url, secret, "late"))
            status, headers, body = late.answer()
            assert waiting_on_the_lock(lock)  # answered while the slot was still held
        first.join(10)
        late.sock.sendall(raw_request(url, secret, "again"))
        again = late.answer()

    assert first_answers[0].status_code == 201
    assert status == 503, body
    assert headers["retry-after"] == "1" and headers["content-type"] == "application/json"
    envelope = json.loads(body)
    assert set(envelope) == ENVELOPE_KEYS
    assert envelope["failure_type"] == "server_fault" and envelope["retryable"] is True
    assert envelope["retry_after"] == 1.0 and "overloaded" in envelope["detail"]
    assert envelope["attempted"] == {"operation": "POST /api/v1/runs"}
    assert again[0] == 201, again
    assert set(Run.objects.values_list("topic", flat=True)) == {"first", "again"}


@pytest.mark.slow
@pytest.mark.serial  # pg_locks is read cluster-wide; WEB_QUEUE_MS is a timing
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_refused_client_that_asked_to_close_is_closed(postgres, tmp_path):
    _, secret = ApiToken.issue("closing-agent")
    with one_slot_server(tmp_path, queue_ms=100) as url, RawConnection(url) as late:
        with run_table_locked() as lock:
            first, _ = report_in_background(url, secret, "first")
            wait_until(lambda: waiting_on_the_lock(lock), 20, "the first report to wait")
            late.sock.sendall(raw_request(url, secret, "late", close=True))
            status, _, _ = late.answer()
        first.join(10)
        assert status == 503
        assert late.closed_by_server()


@pytest.mark.slow
@pytest.mark.serial  # pg_locks is read cluster-wide; WEB_QUEUE_MS is a timing
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_request_waiting_within_the_bar_is_served_once_the_slot_is_free(postgres, tmp_path):
    _, secret = ApiToken.issue("patient-agent")
    with one_slot_server(tmp_path, queue_ms=30_000) as url:
        with run_table_locked() as lock:
            first, first_answers = report_in_background(url, secret, "first")
            wait_until(lambda: waiting_on_the_lock(lock), 20, "the first report to wait")
            second, second_answers = report_in_background(url, secret, "second")
        first.join(30)
        second.join(30)

    assert [first_answers[0].status_code, second_answers[0].status_code] == [201, 201]
    assert set(Run.objects.values_list("topic", flat=True)) == {"first", "second"}


# The admission itself, on threads of this process: who is let in, who waits, who is refused.


class Gate:
    """A WSGI app whose requests each wait until the test opens the gate."""

    def __init__(self) -> None:
        self.inside = threading.Semaphore(0)
        self.open = threading.Event()

    def __call__(self, environ, start_response):
        self.inside.release()
        self.open.wait(30)
        start_response("201 Created", [])
        return [b"served"]


def call(app, path: str = "/api/v1/runs") -> tuple[str, dict[str, str], bytes]:
    answer: dict = {}

    def start_response(status, headers):
        answer["status"], answer["headers"] = status, dict(headers)

    body = b"".join(app({"REQUEST_METHOD": "POST", "PATH_INFO": path}, start_response))
    return answer["status"], answer["headers"], body


def in_thread(app, path: str = "/api/v1/runs") -> tuple[threading.Thread, list]:
    answers: list = []
    thread = threading.Thread(target=lambda: answers.append(call(app, path)))
    thread.start()
    return thread, answers


def test_past_the_waiting_line_a_newcomer_is_refused_without_waiting():
    gate = Gate()
    admission = Admission(gate, slots=1, queue_ms=60_000, waiting=1, idling=0)
    working, worked = in_thread(admission)
    assert gate.inside.acquire(timeout=10)
    waiting, waited = in_thread(admission)
    wait_until(lambda: admission.waiting == 1, 10, "the second request to wait")
    status, headers, body = call(admission)  # a third: nobody ahead of it will leave soon
    assert status.startswith("503") and headers["Retry-After"] == "1"
    assert json.loads(body)["failure_type"] == "server_fault"
    gate.open.set()
    for thread in (working, waiting):
        thread.join(10)
    assert [worked[0][0], waited[0][0]] == ["201 Created", "201 Created"]
    assert admission.free == 1 and admission.waiting == 0


def test_a_waiting_request_is_refused_at_the_bar_and_its_place_freed():
    gate = Gate()
    admission = Admission(gate, slots=1, queue_ms=50, waiting=4, idling=0)
    working, worked = in_thread(admission)
    assert gate.inside.acquire(timeout=10)
    assert call(admission)[0].startswith("503")
    assert admission.waiting == 0
    gate.open.set()
    working.join(10)
    assert worked[0][0] == "201 Created"
    assert call(admission)[0] == "201 Created"  # the slot is back


def test_a_refused_page_gets_plain_text_not_the_api_envelope():
    gate = Gate()
    admission = Admission(gate, slots=1, queue_ms=0, waiting=0, idling=0)
    working, _ = in_thread(admission)
    assert gate.inside.acquire(timeout=10)
    status, headers, body = call(admission, "/runs/")
    gate.open.set()
    working.join(10)
    assert status.startswith("503") and headers["Content-Type"].startswith("text/plain")
    assert b"overloaded" in body


class LongPoll:
    """A WSGI app whose requests wait, idle, until the test releases them (a long poll)."""

    def __init__(self) -> None:
        self.waiting = threading.Semaphore(0)
        self.release = threading.Event()
        self.waited: list[bool] = []

    def __call__(self, environ, start_response):
        with overload.idle(environ) as may_wait:
            self.waited.append(may_wait)
            if may_wait:
                self.waiting.release()
                self.release.wait(30)
        start_response("200 OK", [])
        return [b"answered"]


def test_a_long_poll_gives_its_slot_to_others_while_it_waits():
    poll = LongPoll()
    served = Gate()
    served.open.set()

    def app(environ, start_response):
        target = poll if environ["PATH_INFO"].endswith("wait") else served
        return target(environ, start_response)

    admission = Admission(app, slots=1, queue_ms=0, waiting=0, idling=1)
    polling, polled = in_thread(admission, "/api/v1/reviews/1?wait")
    assert poll.waiting.acquire(timeout=10)
    assert call(admission)[0] == "201 Created"  # the only slot is free while the poll waits
    poll.release.set()
    polling.join(10)
    assert polled[0][0] == "200 OK" and poll.waited == [True]
    assert admission.free == 1 and admission.idling == 0


def test_past_the_long_poll_limit_a_poll_answers_without_waiting():
    poll = LongPoll()
    admission = Admission(poll, slots=2, queue_ms=0, waiting=0, idling=1)
    first, _ = in_thread(admission, "/api/v1/reviews/1?wait")
    assert poll.waiting.acquire(timeout=10)
    assert call(admission, "/api/v1/reviews/2?wait")[0] == "200 OK"  # at once: no wait
    poll.release.set()
    first.join(10)
    assert sorted(poll.waited) == [False, True]


def test_outside_the_admission_a_long_poll_may_wait():
    with overload.idle({}) as may_wait:
        assert may_wait


class SlowBody:
    """A request body that arrives only when the test says so."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.reading = threading.Event()
        self.arrive = threading.Event()

    def read(self, size: int = -1) -> bytes:
        self.reading.set()
        self.arrive.wait(30)
        return self.data[:size] if size >= 0 else self.data


def test_a_body_sent_slowly_holds_no_work_slot_while_it_arrives():
    seen: list[bytes] = []

    def app(environ, start_response):
        if "wsgi.input" in environ:
            seen.append(environ["wsgi.input"].read())
        start_response("201 Created", [])
        return [b"served"]

    admission = Admission(app, slots=1, queue_ms=0, waiting=0, idling=0)
    body = SlowBody(b'{"status": "ok"}')
    slow = {"REQUEST_METHOD": "POST", "PATH_INFO": "/api/v1/runs"}
    slow |= {"CONTENT_LENGTH": str(len(body.data)), "wsgi.input": body}
    answers: list = []
    sending = threading.Thread(
        target=lambda: answers.append(list(admission(slow, lambda *args: None)))
    )
    sending.start()
    assert body.reading.wait(10)
    assert call(admission)[0] == "201 Created"  # the only slot serves others meanwhile
    body.arrive.set()
    sending.join(10)
    assert answers == [[b"served"]] and seen == [b'{"status": "ok"}']
