"""Bodies sent with `Transfer-Encoding: chunked` over real HTTP: read by a server that decodes
them (the web server as shipped, granian), refused with 411 by one that cannot tell where they
end (Django's development server, as pytest-django's live_server runs it), and held to the size
limit either way.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterable, Iterator
from urllib.parse import urlsplit

import pytest
from django.conf import settings

from orchestrator.models import ApiToken, Run
from tests.api.helpers import ENVELOPE_KEYS, ok_run, web_env
from tests.services import start_web

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def post_chunked(url: str, token: str, pieces: Iterable[bytes]) -> tuple[int, dict]:
    """POST `pieces` as a chunked body on a raw socket; return the status and the JSON answer.

    A server may answer (413) and close before the whole body is sent: sending stops there and
    the answer is read all the same.
    """
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=30) as sock:
        head = (
            "POST /api/v1/runs HTTP/1.1\r\n"
            f"Host: {parts.hostname}:{parts.port}\r\n"
            f"Authorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
            "Connection: close\r\n\r\n"
        )
        try:
            sock.sendall(head.encode())
            for piece in pieces:
                sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            sock.sendall(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered early and closed: read what it said
        answer = b""
        while chunk := _recv(sock):
            answer += chunk
    header, _, body = answer.partition(b"\r\n\r\n")
    status = int(header.split(b" ", 2)[1])
    if b"transfer-encoding: chunked" in header.lower():
        body = _unchunk(body)
    return status, json.loads(body)


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except ConnectionResetError:
        return b""


def _unchunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2 :]
    return out


def in_pieces(body: bytes, size: int = 1000) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


@pytest.fixture
def web(postgres, tmp_path) -> Iterator[str]:
    server, url = start_web(web_env(tmp_path), tmp_path / "web.log", WEB_CONCURRENCY="1")
    try:
        yield url
    finally:
        server.stop()


def test_the_web_server_reads_a_chunked_body_and_stores_the_run(web):
    _, secret = ApiToken.issue("chunked-agent")
    body = json.dumps(ok_run(topic="chunked", detail="x" * 20_000)).encode()
    status, run = post_chunked(web, secret, in_pieces(body))
    assert status == 201, run
    assert run["topic"] == "chunked" and len(run["detail"]) == 20_000
    assert Run.objects.filter(pk=run["id"], topic="chunked").exists()


def test_a_chunked_body_over_the_limit_is_a_413_and_is_not_read_to_the_end(web):
    _, secret = ApiToken.issue("chunked-agent")
    limit = settings.API_MAX_BODY_BYTES
    too_big = (b"x" * 65536 for _ in range(limit // 65536 + 16))  # ~11 MB, never built whole
    status, body = post_chunked(web, secret, too_big)
    assert status == 413, body
    assert set(body) == ENVELOPE_KEYS and body["failure_type"] == "invalid_input"
    assert not Run.objects.exists()


def test_a_server_that_cannot_end_a_chunked_body_answers_411(live_server):
    _, secret = ApiToken.issue("chunked-agent")
    body = json.dumps(ok_run()).encode()
    status, answer = post_chunked(live_server.url, secret, in_pieces(body))
    assert status == 411, answer
    assert set(answer) == ENVELOPE_KEYS and answer["failure_type"] == "invalid_input"
    assert "Content-Length" in answer["detail"]
    assert not Run.objects.exists()
