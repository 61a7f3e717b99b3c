"""Overload behind the web server as shipped (`config.serve`, PostgreSQL): a process works on
WEB_THREADS requests at once; a newcomer that finds no slot free within WEB_QUEUE_MS gets a 503
with Retry-After in the envelope and is not processed, its connection kept for its next request.

The server here has one slot. A lock on the run table (held by the test) keeps that slot busy
with a first report for as long as the test wants.
"""

from __future__ import annotations

import asyncio
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
from orchestrator.api.overload import Admission, shed
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


# The admission itself, on an event loop of this test: who is let in, who waits, who is refused.


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 30))


def test_past_the_waiting_line_a_newcomer_is_refused_without_waiting():
    async def scenario():
        admission = Admission(slots=1, queue_ms=60_000, waiting=1, idling=0)
        assert await admission.enter()
        second = asyncio.create_task(admission.enter())
        await asyncio.sleep(0)
        assert admission.waiting == 1
        third = await admission.enter()  # nobody ahead of it will leave soon
        admission.leave()
        return third, await second, admission

    third, second, admission = run(scenario())
    assert third is False and second is True
    assert admission.free == 0 and admission.waiting == 0


def test_a_waiting_request_is_refused_at_the_bar_and_its_place_freed():
    async def scenario():
        admission = Admission(slots=1, queue_ms=50, waiting=4, idling=0)
        assert await admission.enter()
        refused = await admission.enter()
        waiting = admission.waiting
        admission.leave()
        return refused, waiting, await admission.enter()  # the slot is back

    assert run(scenario()) == (False, 0, True)


def test_a_freed_slot_goes_to_the_first_in_line_not_a_newcomer():
    async def scenario():
        admission = Admission(slots=1, queue_ms=60_000, waiting=4, idling=0)
        assert await admission.enter()
        first = asyncio.create_task(admission.enter())
        await asyncio.sleep(0)
        admission.leave()
        newcomer = asyncio.create_task(admission.enter())
        await asyncio.sleep(0)
        admission.leave()
        return await first, await newcomer

    assert run(scenario()) == (True, True)


def test_a_refused_page_gets_plain_text_and_an_agent_the_envelope():
    status, headers, body = shed("GET", "/runs/")
    assert status == 503 and dict(headers)["Content-Type"].startswith("text/plain")
    assert b"overloaded" in body
    status, headers, body = shed("POST", "/api/v1/runs")
    assert status == 503 and dict(headers)["Content-Type"] == "application/json"
    assert json.loads(body)["failure_type"] == "server_fault"


def test_a_long_poll_gives_its_slot_to_others_while_it_waits():
    """The poll runs on a thread (as a2wsgi runs the WSGI app), the admission on the loop."""

    async def scenario():
        admission = Admission(slots=1, queue_ms=0, waiting=0, idling=1)
        assert await admission.enter()
        polling, release = threading.Event(), threading.Event()

        def poll() -> bool:
            with admission.idle() as may_wait:
                polling.set()
                release.wait(10)
            return may_wait

        waited = asyncio.get_running_loop().run_in_executor(None, poll)
        await asyncio.to_thread(polling.wait, 10)
        other = await admission.enter()  # the only slot is free while the poll waits
        release.set()
        await asyncio.sleep(0.05)
        admission.leave()  # the other request is done: the poll takes its slot back
        may_wait = await waited
        return other, may_wait, admission

    other, may_wait, admission = run(scenario())
    assert other is True and may_wait is True
    assert admission.free == 0 and admission.idling == 0


def test_past_the_long_poll_limit_a_poll_answers_without_waiting():
    async def scenario():
        admission = Admission(slots=2, queue_ms=0, waiting=0, idling=0)
        assert await admission.enter()

        def poll() -> bool:
            with admission.idle() as may_wait:
                return may_wait

        return await asyncio.to_thread(poll), admission.free

    assert run(scenario()) == (False, 1)


def test_outside_the_admission_a_long_poll_may_wait():
    with overload.idle({}) as may_wait:
        assert may_wait
