"""Single reports served by the web worker itself (`config.server`), behind the real server
(gunicorn with the Procfile's worker class, PostgreSQL): read whole off the socket and answered
without gunicorn's parser, they get the answer the whole stack gives, they are logged in the
access log as gunicorn logs a request, the connection goes on, and whatever is not a plain
report (an invalid body, a pipelined pair, a header gunicorn reads for itself) goes the usual way
and is answered once.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.models import ApiToken, Run
from tests.api.helpers import ENVELOPE_KEYS, ok_run, web_env
from tests.api.test_overload import RawConnection
from tests.services import Process, gunicorn_url

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

# What differs between two stored reports' answers, or is the server's own.
VARYING_HEADERS = {"date", "server", "connection"}
VARYING_FIELDS = {"id", "created_at", "idempotency_key", "topic"}


@contextlib.contextmanager
def web(tmp_path: Path) -> Iterator[str]:
    env = web_env(tmp_path)
    command = (
        "gunicorn config.wsgi --worker-class config.server.ThreadWorker"
        " --bind 127.0.0.1:0 --workers 1 --threads 2"
        f" --access-logfile {tmp_path / 'access.log'}"
    )
    server = Process("web", command, env, tmp_path / "web.log").start()
    try:
        yield gunicorn_url(server)
    finally:
        server.stop()


def report(url: str, secret: str, key: str, *extra: str, body: bytes | None = None) -> bytes:
    host = url.removeprefix("http://")
    data = body if body is not None else json.dumps(ok_run(topic=key)).encode()
    lines = [
        "POST /api/v1/runs HTTP/1.1",
        f"Host: {host}",
        f"Authorization: Bearer {secret}",
        f"Idempotency-Key: {key}",
        "Content-Type: application/json",
        f"Content-Length: {len(data)}",
        *extra,
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def answered(conn: RawConnection) -> tuple[int, dict[str, str], dict]:
    status, headers, body = conn.answer()
    return status, headers, json.loads(body)


def test_a_report_served_by_the_worker_is_answered_as_through_gunicorns_parser(postgres, tmp_path):
    """The same report twice on one connection: once plain (served by the worker), once with a
    Forwarded header (gunicorn reads that one itself, so the usual way through gunicorn's
    parser); then a third plain one on the same connection. Same status, headers and body."""
    _, secret = ApiToken.issue("plain-agent")
    with web(tmp_path) as url, RawConnection(url) as conn:
        conn.sock.sendall(report(url, secret, "plain"))
        plain = answered(conn)
        conn.sock.sendall(report(url, secret, "usual", "Forwarded: for=192.0.2.1"))
        usual = answered(conn)
        conn.sock.sendall(report(url, secret, "again"))
        again = answered(conn)
    access = (tmp_path / "access.log").read_text()

    assert plain[0] == usual[0] == again[0] == 201
    assert plain[1].keys() - VARYING_HEADERS == usual[1].keys() - VARYING_HEADERS
    for name in plain[1].keys() - VARYING_HEADERS - {"content-length"}:
        assert plain[1][name] == usual[1][name], name
    assert plain[1]["connection"] == "keep-alive"
    assert {k: v for k, v in plain[2].items() if k not in VARYING_FIELDS} == {
        k: v for k, v in usual[2].items() if k not in VARYING_FIELDS
    }
    assert sorted(Run.objects.values_list("topic", flat=True)) == ["again", "plain", "usual"]
    # One access-log line a request, whichever way it was served.
    assert len(re.findall(r'"POST /api/v1/runs HTTP/1.1" 201 \d+', access)) == 3, access


def test_an_invalid_report_goes_the_usual_way_and_is_answered_once(postgres, tmp_path):
    _, secret = ApiToken.issue("sloppy-agent")
    invalid = json.dumps({"status": "error", "agent": "a", "source": "s"}).encode()
    with web(tmp_path) as url, RawConnection(url) as conn:
        conn.sock.sendall(report(url, secret, "bad", body=invalid))
        status, _, body = answered(conn)
        conn.sock.sendall(report(url, secret, "good"))
        after = answered(conn)
    access = (tmp_path / "access.log").read_text()

    assert status == 422 and set(body) == ENVELOPE_KEYS, body["detail"]
    assert body["failure_type"] == "invalid_input"
    assert after[0] == 201
    assert list(Run.objects.values_list("topic", flat=True)) == ["good"]
    assert access.count('"POST /api/v1/runs HTTP/1.1" 422') == 1, access


def test_pipelined_reports_are_each_answered_in_order(postgres, tmp_path):
    _, secret = ApiToken.issue("eager-agent")
    with web(tmp_path) as url, RawConnection(url) as conn:
        conn.sock.sendall(report(url, secret, "one") + report(url, secret, "two"))
        first, second = answered(conn), answered(conn)

    assert [first[0], second[0]] == [201, 201]
    assert [first[2]["topic"], second[2]["topic"]] == ["one", "two"]
    assert sorted(Run.objects.values_list("topic", flat=True)) == ["one", "two"]


def test_a_report_asking_to_close_is_answered_and_closed(postgres, tmp_path):
    _, secret = ApiToken.issue("brief-agent")
    with web(tmp_path) as url, RawConnection(url) as conn:
        conn.sock.sendall(report(url, secret, "once", "Connection: close"))
        status, headers, _ = answered(conn)
        assert conn.closed_by_server()

    assert status == 201 and headers["connection"] == "close"
    assert list(Run.objects.values_list("topic", flat=True)) == ["once"]
