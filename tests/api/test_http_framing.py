"""HTTP framing against the two topologies: the web server as shipped (`config.serve`, on
PostgreSQL) alone, and behind nginx with the shipped config (deploy/nginx/). Raw bytes on a
socket, each an authenticated `POST /api/v1/runs` whose run carries a unique topic, so that the
database says afterwards whether the app read it as a report.

Every ambiguous framing is refused (400, or the connection closed without a 2xx) and stores
nothing; valid pipelined requests each get their own answer; malformed and oversized bodies get
a 400/413 in the envelope, or the server's own 400 for framing it rejects itself. A socket
timeout bounds each exchange; the tests assert what was answered, not how soon.

Where the server alone reads bytes differently from a strict parser (a bare LF ends a header
line; Transfer-Encoding beside Content-Length wins and the connection closes after the answer, as
RFC 9112 section 6.3 allows), the test is
an expected failure on that topology only, naming the leniency. Behind nginx nothing is expected
to fail: every case is refused (a 4xx in the envelope, or the connection closed), or read by nginx
as exactly one request, which it sends on framed by itself, so that both hops read the same.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
import pytest
from django.conf import settings
from django.db import connection

from orchestrator.models import ApiToken, Run
from tests.api.helpers import ENVELOPE_KEYS, ok_run, web_env
from tests.conftest import require_service
from tests.services import PrivateNginx, nginx_bin, start_web

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

BOUND = 5.0  # seconds a socket waits for the server's next bytes: a bound, never a measure
HEADER_TIMEOUT_MS = 1000
BODY_TIMEOUT_MS = 1500
NGINX_BODY_TIMEOUT = 10.0  # client_body_timeout in deploy/nginx/failsight.conf.template


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def envelope(self) -> dict:
        assert self.headers.get("content-type", "").startswith("application/json"), self
        body = json.loads(self.body)
        assert set(body) == ENVELOPE_KEYS, body
        return body


@dataclass
class Exchange:
    """What came back on one connection: its answers, and whether the server closed it."""

    answers: list[Answer]
    closed: bool

    @property
    def statuses(self) -> list[int]:
        return [answer.status for answer in self.answers]


@dataclass
class Web:
    url: str
    proxied: bool = False

    @property
    def address(self) -> tuple[str, int]:
        parts = urlsplit(self.url)
        return parts.hostname or "127.0.0.1", parts.port or 80


ALONE, PROXIED = "server alone", "nginx in front"


@pytest.fixture(scope="module", params=[ALONE, PROXIED])
def web(request, django_db_setup, tmp_path_factory) -> Iterator[Web]:
    require_service(connection.vendor == "postgresql", "PostgreSQL")
    proxied = request.param == PROXIED
    if proxied:
        require_service(nginx_bin() is not None, "nginx")
    var = tmp_path_factory.mktemp("framing")
    settings_ = {"WEB_CONCURRENCY": "1", "WEB_BODY_TIMEOUT_MS": str(BODY_TIMEOUT_MS)}
    if not proxied:
        # Alone, the server's header timeout closes clients trickling their heads (shortened
        # here); behind nginx the proxy's does, and the server keeps its default, which must
        # stay above the proxy's idle keep-alive to it.
        settings_["WEB_HEADER_TIMEOUT_MS"] = str(HEADER_TIMEOUT_MS)
    server, url = start_web(web_env(var), var / "web.log", **settings_)
    proxy = None
    try:
        if proxied:
            proxy = PrivateNginx(urlsplit(url).netloc, var / "staticfiles").start()
            url = proxy.url
        yield Web(url, proxied)
    finally:
        if proxy is not None:
            proxy.remove()
        server.stop()


def lenient_alone(request: pytest.FixtureRequest, web: Web, leniency: str) -> None:
    """Expect this test to fail on the server alone, for the `leniency` named; nginx in front
    refuses the case or reads it as one request for the server."""
    if not web.proxied:
        request.applymarker(pytest.mark.xfail(strict=True, reason=leniency))


@pytest.fixture
def secret(db) -> str:
    return ApiToken.issue("framing-agent")[1]


def run_body(marker: str) -> bytes:
    return json.dumps(ok_run(topic=marker)).encode()


def head(secret: str, *lines: bytes) -> bytes:
    """A request head up to (not including) the lines given, which end it as they please."""
    start = (
        b"POST /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Authorization: Bearer " + secret.encode() + b"\r\nContent-Type: application/json\r\n"
    )
    return start + b"".join(lines)


def request(secret: str, marker: str) -> bytes:
    body = run_body(marker)
    return head(secret, b"Content-Length: %d\r\n\r\n" % len(body)) + body


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def stored(*markers: str) -> int:
    return Run.objects.filter(topic__in=markers).count()


def exchange(
    web: Web,
    data: bytes,
    *,
    half_close: bool = False,
    answers: int | None = 1,
    bound: float = BOUND,
) -> Exchange:
    """Send `data` in one write and read until `answers` whole answers came (None: until the
    server closes the connection), the server closes it, or it falls silent for `bound` s."""
    with socket.create_connection(web.address, timeout=bound) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
        received, closed = read_all(sock, answers)
    return Exchange(parse_answers(received), closed)


def read_all(sock: socket.socket, answers: int | None = None) -> tuple[bytes, bool]:
    received = b""
    while True:
        if answers is not None and len(parse_answers(received)) >= answers:
            return received, False
        try:
            piece = sock.recv(65536)
        except TimeoutError:
            return received, False
        except ConnectionResetError:
            return received, True
        if not piece:
            return received, True
        received += piece


def parse_answers(data: bytes) -> list[Answer]:
    """The whole answers in `data` (one still arriving is left out)."""
    answers = []
    while b"\r\n\r\n" in data:
        top, data = data.split(b"\r\n\r\n", 1)
        status_line, *lines = top.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            if b"\r\n0\r\n\r\n" not in data and not data.startswith(b"0\r\n\r\n"):
                break
            body, data = unchunk(data)
        else:
            length = int(headers.get("content-length", "0"))
            if len(data) < length:
                break
            body, data = data[:length], data[length:]
        answers.append(Answer(int(status_line.split()[1]), headers, body))
    return answers


def unchunk(data: bytes) -> tuple[bytes, bytes]:
    body = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return body, data.partition(b"\r\n")[2]
        body, data = body + data[:size], data[size + 2 :]
    return body, b""


def assert_refused(web: Web, result: Exchange) -> None:
    """A 400 (alone) or 4xx answers in the envelope (behind nginx: the app's, or nginx's for
    bytes it could not read as a request), or the connection closed without any answer."""
    assert not any(200 <= status < 300 for status in result.statuses), result
    if result.closed and not result.answers:
        return
    if not web.proxied:
        assert result.statuses == [400], result
        return
    assert result.answers and all(400 <= status < 500 for status in result.statuses), result
    assert {answer.envelope()["failure_type"] for answer in result.answers} == {"invalid_input"}


def assert_refused_or_read_once(web: Web, result: Exchange, marker: str) -> None:
    """Read as exactly one report (a 201, stored once), or refused: nothing stored, and only 4xx
    answers (the server alone may answer the bytes it could not read as a request of their own)."""
    if result.statuses[:1] == [201]:
        assert len(result.answers) == 1 and stored(marker) == 1, result
        return
    assert stored(marker) == 0, result
    assert all(400 <= status < 500 for status in result.statuses), result
    if web.proxied:
        assert_refused(web, result)


AMBIGUOUS = {
    "Transfer-Encoding hidden behind a bare CR": (
        lambda n: b"X-A: 1\rTransfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n" % n
    ),
    "a second Content-Length behind a bare LF": (
        lambda n: b"X-A: 1\nContent-Length: 5\r\nContent-Length: %d\r\n\r\n" % n
    ),
    "a second Content-Length behind a bare CR": (
        lambda n: b"X-A: 1\rContent-Length: 5\r\nContent-Length: %d\r\n\r\n" % n
    ),
    "an obs-fold line without a colon": (
        lambda n: b"X-A: 1\r\n folded\r\nContent-Length: %d\r\n\r\n" % n
    ),
    "a header line without a colon": lambda n: b"X-A 1\r\nContent-Length: %d\r\n\r\n" % n,
    "two different Content-Lengths": (
        lambda n: b"Content-Length: %d\r\nContent-Length: %d\r\n\r\n" % (n, n + 1)
    ),
    "Content-Length with a sign": lambda n: b"Content-Length: +%d\r\n\r\n" % n,
    "Content-Length in hexadecimal": lambda n: b"Content-Length: 0x%x\r\n\r\n" % n,
    "a space before the colon": lambda n: b"Content-Length : %d\r\n\r\n" % n,
    "Content-Length as a list": lambda n: b"Content-Length: %d, %d\r\n\r\n" % (n, n),
    "a negative Content-Length": lambda n: b"Content-Length: -1\r\n\r\n",
    "a NUL in a header value": lambda n: b"X-A: 1\x00\r\nContent-Length: %d\r\n\r\n" % n,
    "a coding that only looks like chunked": (
        lambda n: b"Transfer-Encoding: xchunked\r\nContent-Length: %d\r\n\r\n" % n
    ),
    "chunked followed by another coding": (
        lambda n: b"Transfer-Encoding: chunked, identity\r\nContent-Length: %d\r\n\r\n" % n
    ),
    "a second Transfer-Encoding": (
        lambda n: b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n"
    ),
    "a space before the colon of Transfer-Encoding": (
        lambda n: b"Transfer-Encoding : chunked\r\nContent-Length: %d\r\n\r\n" % n
    ),
}


@pytest.mark.parametrize("case", list(AMBIGUOUS))
def test_an_ambiguous_head_is_refused_and_stores_nothing(web, secret, case):
    body = run_body(case)
    result = exchange(web, head(secret, AMBIGUOUS[case](len(body))) + body + b" ")
    assert_refused(web, result)
    assert stored(case) == 0


def test_transfer_encoding_behind_a_bare_lf_is_read_as_chunked_and_stores_nothing(web, secret):
    """Both hops end a header line at a bare LF: the hidden Transfer-Encoding is a header of its
    own, beside the Content-Length. nginx refuses the two together; the server alone reads the
    body as chunked, and refuses it (it is not)."""
    body = run_body("te-behind-lf")
    te = b"X-A: 1\nTransfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n" % len(body)
    result = exchange(web, head(secret, te) + body, answers=None)
    assert result.statuses == [400] and result.closed, result
    assert stored("te-behind-lf") == 0
    if not web.proxied:
        assert "chunk" in result.answers[0].envelope()["detail"]


def test_a_bare_lf_before_the_blank_line_never_merges_the_next_request_into_this_one(web, secret):
    """`X-A: 1\\n\\r\\n` ends the head: the request behind it is read as a request of its own,
    never as more header lines of the first (a second agent's token under the first URL)."""
    other = ApiToken.issue("second-agent")[1]
    first = run_body("merge-first")
    data = head(secret, b"Content-Length: %d\r\nX-A: 1\n\r\n" % len(first)) + first
    data += request(other, "merge-second")
    result = exchange(web, data, answers=2)
    assert result.statuses in ([201, 201], [400]), result
    if result.statuses == [400]:
        assert stored("merge-first", "merge-second") == 0
        return
    topics = [json.loads(answer.body)["topic"] for answer in result.answers]
    assert topics == ["merge-first", "merge-second"]
    assert stored("merge-first") == 1 and stored("merge-second") == 1


def test_a_request_inside_a_body_is_part_of_that_body_never_a_request(web, secret):
    inner = request(secret, "inside-a-body")
    outer = head(secret, b"Content-Length: %d\r\n\r\n" % len(inner)) + inner
    result = exchange(web, outer)
    assert result.statuses == [400], result  # the outer body is not JSON
    assert "not valid JSON" in result.answers[0].envelope()["detail"]
    assert stored("inside-a-body") == 0


def test_a_request_after_a_chunked_body_with_a_content_length_is_never_read(web, secret):
    """Content-Length and Transfer-Encoding together: the server reads the body as chunked and
    closes the connection after its answer, so bytes after the last chunk (where a reader of the
    Content-Length would end the body elsewhere) are never a request."""
    smuggled = request(secret, "after-the-last-chunk")
    data = head(secret, b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n")
    data += chunk(b"{}") + b"0\r\n\r\n" + smuggled
    result = exchange(web, data, answers=None)
    assert len(result.answers) == 1 and result.closed, result
    assert stored("after-the-last-chunk") == 0


def test_content_length_and_transfer_encoding_together_are_refused(request, web, secret):
    lenient_alone(
        request,
        web,
        "granian (hyper) reads Transfer-Encoding over Content-Length, drops the latter before "
        "the application sees it and closes after answering (RFC 9112 6.3); it never refuses",
    )
    body = run_body("cl-and-te")
    data = head(secret, b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(body))
    result = exchange(web, data + chunk(body) + b"0\r\n\r\n")
    assert stored("cl-and-te") == 0, result
    assert_refused(web, result)


def test_a_content_length_line_ended_by_a_bare_lf_is_refused_or_read_once(request, web, secret):
    """nginx, too, ends a header line at a bare LF (RFC 9112 2.2 allows it), and sends the
    request on with CRLF line ends: both hops read the one Content-Length."""
    lenient_alone(
        request, web, "granian (httparse) ends a header line at a bare LF, as RFC 9112 2.2 allows"
    )
    body = run_body("bare-lf")
    result = exchange(web, head(secret, b"Content-Length: %d\n\r\n" % len(body)) + body)
    if web.proxied:
        assert_refused_or_read_once(web, result, "bare-lf")
        return
    assert stored("bare-lf") == 0, result
    assert_refused(web, result)


CHUNKED = b"Transfer-Encoding: chunked\r\n"


def chunked(marker: str, size_line_end: bytes = b"\r\n", data_end: bytes = b"\r\n") -> bytes:
    body = run_body(marker)
    return b"%x%s%s%s0\r\n\r\n" % (len(body), size_line_end, body, data_end)


def http10(data: bytes) -> bytes:
    return data.replace(b" HTTP/1.1\r\n", b" HTTP/1.0\r\n", 1)


# Framings RFC 9112 section 6 (and the research on chunk parsing that followed it) shows two
# parsers reading differently: each must be refused. Beside each, the leniency of the server
# alone where it reads one anyway (None: it refuses); nginx in front refuses each or reads it as
# one request that it sends on framed by itself.
SMUGGLING = {
    "Transfer-Encoding chunked sent twice": (
        lambda s, m: head(s, CHUNKED + CHUNKED + b"\r\n") + chunked(m),
        "granian reads two `Transfer-Encoding: chunked` fields as one (the coding applied "
        "twice, which RFC 9112 6.1 forbids)",
    ),
    "gzip before chunked": (
        lambda s, m: head(s, b"Transfer-Encoding: gzip, chunked\r\n\r\n") + chunked(m),
        "granian ignores the gzip coding: the body is read as if it were already decoded",
    ),
    "a request line in the trailer section": (
        lambda s, m: (
            head(s, CHUNKED + b"\r\n")
            + chunked(m).removesuffix(b"\r\n")
            + b"POST /api/v1/runs HTTP/1.1\r\n\r\n"
        ),
        None,
    ),
    "Content-Length and Transfer-Encoding behind an obs-fold": (
        lambda s, m: (
            head(
                s,
                b"Content-Length: %d\r\nTransfer-Encoding:\r\n chunked\r\n\r\n" % len(run_body(m)),
            )
            + run_body(m)
        ),
        None,
    ),
    "Transfer-Encoding in an HTTP/1.0 request": (
        lambda s, m: http10(head(s, CHUNKED + b"\r\n")) + chunked(m),
        None,
    ),
    "a chunk-size line ended by a bare LF": (
        lambda s, m: head(s, CHUNKED + b"\r\n") + chunked(m, size_line_end=b"\n"),
        None,
    ),
    "chunk data ended by a bare LF": (
        lambda s, m: head(s, CHUNKED + b"\r\n") + chunked(m, data_end=b"\n"),
        None,
    ),
    "a chunk extension ended by a bare LF": (
        lambda s, m: head(s, CHUNKED + b"\r\n") + chunked(m, size_line_end=b";x\n"),
        None,
    ),
    "a chunk extension ended by a bare CR": (
        lambda s, m: head(s, CHUNKED + b"\r\n") + chunked(m, size_line_end=b";x\r"),
        None,
    ),
}


@pytest.mark.parametrize("case", list(SMUGGLING))
def test_a_framing_two_parsers_may_read_differently_is_refused(request, web, secret, case):
    build, leniency = SMUGGLING[case]
    if leniency:
        lenient_alone(request, web, leniency)
    result = exchange(web, build(secret, case))
    if web.proxied:
        assert_refused_or_read_once(web, result, case)
        return
    assert stored(case) == 0, result
    assert_refused(web, result)


# Framings RFC 9112 lets a recipient read, or refuse (two equal Content-Lengths): each is refused,
# or read as exactly one request, by both topologies. A field name with an underscore is another
# field than the one with a dash, which neither hop may take for it.
TOLERATED = {
    "a chunk extension": (
        lambda s, m: head(s, CHUNKED + b"\r\n") + chunked(m, size_line_end=b";name=value\r\n")
    ),
    "a quoted chunk extension holding a semicolon": (
        lambda s, m: head(s, CHUNKED + b"\r\n") + chunked(m, size_line_end=b';n="a;b"\r\n')
    ),
    "a chunk size with twenty leading zeros": (
        lambda s, m: head(s, CHUNKED + b"\r\n") + b"0" * 20 + chunked(m)
    ),
    "chunked in capitals": lambda s, m: head(s, b"Transfer-Encoding: CHUNKED\r\n\r\n") + chunked(m),
    "the same Content-Length twice": (
        lambda s, m: (
            head(s, b"Content-Length: %d\r\n" % len(run_body(m)) * 2 + b"\r\n") + run_body(m)
        )
    ),
    "Transfer_Encoding beside Content-Length": (
        lambda s, m: (
            head(s, b"Transfer_Encoding: chunked\r\nContent-Length: %d\r\n\r\n" % len(run_body(m)))
            + run_body(m)
        )
    ),
    "Content_Length without Content-Length": (
        lambda s, m: head(s, b"Content_Length: %d\r\n\r\n" % len(run_body(m))) + run_body(m)
    ),
}


@pytest.mark.parametrize("case", list(TOLERATED))
def test_a_framing_the_rfc_tolerates_is_read_once_or_refused(web, secret, case):
    result = exchange(web, TOLERATED[case](secret, case))
    assert_refused_or_read_once(web, result, case)


def test_pipelined_requests_each_get_their_own_answer(web, secret):
    data = request(secret, "pipelined-1") + request(secret, "pipelined-2")
    result = exchange(web, data, answers=2)
    assert result.statuses == [201, 201], result
    topics = [json.loads(answer.body)["topic"] for answer in result.answers]
    assert topics == ["pipelined-1", "pipelined-2"]
    assert stored("pipelined-1") == 1 and stored("pipelined-2") == 1


MALFORMED_CHUNKS = {
    "a chunk size that is not hexadecimal": lambda body: b"zz\r\n" + body + b"\r\n0\r\n\r\n",
    "a negative chunk size": lambda body: b"-%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n",
    "a chunk size past 64 bits": lambda body: b"fffffffffffffffffff\r\n" + body + b"\r\n0\r\n\r\n",
    "a chunk shorter than its size": (
        lambda body: b"%x\r\n" % (len(body) + 10) + body + b"\r\n0\r\n\r\n"
    ),
}


@pytest.mark.parametrize("case", list(MALFORMED_CHUNKS))
def test_a_malformed_chunked_body_is_a_400_in_the_envelope(web, secret, case):
    """Behind nginx, a body cut short by the client is never answered: nginx closes the
    connection, and the app never sees the request."""
    body = run_body(case)
    data = head(secret, b"Transfer-Encoding: chunked\r\n\r\n") + MALFORMED_CHUNKS[case](body)
    result = exchange(web, data, half_close=True)  # a short chunk ends where the client stops
    assert stored(case) == 0
    if web.proxied and not result.answers:
        assert result.closed, result
        return
    assert result.statuses == [400], result
    assert result.answers[0].envelope()["failure_type"] == "invalid_input"


def test_a_whole_json_chunk_followed_by_broken_framing_is_refused(web, secret):
    """The server ends the body with a disconnect, never as if it were whole (granian's WSGI
    input, served before, ended it quietly and the part that arrived was stored)."""
    body = run_body("then-broken")
    data = head(secret, b"Transfer-Encoding: chunked\r\n\r\n") + chunk(body) + b"zz\r\nxx\r\n"
    result = exchange(web, data, half_close=True)
    assert stored("then-broken") == 0, result
    if web.proxied and not result.answers:
        assert result.closed, result
        return
    assert result.statuses == [400], result


def test_a_body_shorter_than_its_content_length_is_a_400(web, secret):
    """Behind nginx, the client that stops sending is never answered: nginx closes the
    connection, and the app never sees the request."""
    body = run_body("cut-short") + b" " * 20
    data = head(secret, b"Content-Length: %d\r\n\r\n" % (len(body) + 30)) + body
    result = exchange(web, data, half_close=True)
    assert stored("cut-short") == 0
    if web.proxied and not result.answers:
        assert result.closed, result
        return
    assert result.statuses == [400], result
    assert "Content-Length" in result.answers[0].envelope()["detail"]


def oversized(web: Web, secret: str, *, chunked: bool) -> Exchange:
    """A body past API_MAX_BODY_BYTES, sent while the server may already have answered."""
    limit = settings.API_MAX_BODY_BYTES
    piece = b" " * 65536
    pieces = limit // len(piece) + 16
    framing = (
        b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % (pieces * len(piece))
    )
    with socket.create_connection(web.address, timeout=BOUND) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, TimeoutError):
            sock.sendall(head(secret, framing + b"\r\nConnection: close\r\n\r\n"))
            for _ in range(pieces):
                sock.sendall(chunk(piece) if chunked else piece)
            sock.sendall(b"0\r\n\r\n" if chunked else b"")
        received, closed = read_all(sock)
    return Exchange(parse_answers(received), closed)


@pytest.mark.parametrize("chunked", [True, False], ids=["chunked", "content-length"])
def test_an_oversized_body_is_a_413_in_the_envelope(web, secret, chunked):
    result = oversized(web, secret, chunked=chunked)
    assert result.statuses == [413], result
    assert result.answers[0].envelope()["failure_type"] == "invalid_input"


def test_slow_clients_trickling_headers_neither_starve_the_server_nor_stay(web, secret):
    """Twenty clients send a header line at a time and never end their heads: meanwhile a report
    is answered, and the server closes every one of them (its header timeout) while they are
    still sending."""
    slow = [socket.create_connection(web.address, timeout=BOUND) for _ in range(20)]
    try:
        for sock in slow:
            sock.sendall(b"POST /api/v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        answer = httpx.post(
            f"{web.url}/api/v1/runs",
            json=ok_run(topic="beside-slow-clients"),
            headers={"Authorization": f"Bearer {secret}"},
            timeout=30,
        )
        cut_off = trickle_until_closed(slow, lines=120)
    finally:
        for sock in slow:
            sock.close()
    assert answer.status_code == 201, answer.text
    assert stored("beside-slow-clients") == 1
    assert cut_off == set(range(20))


def trickle_until_closed(socks: list[socket.socket], lines: int) -> set[int]:
    """Send each open socket one more header line, 0.1 s apart, up to `lines` rounds (far past
    the header timeout); return the indexes of those the server closed meanwhile."""
    closed: set[int] = set()
    for n in range(lines):
        for index, sock in enumerate(socks):
            if index not in closed and server_closed(sock, b"X-Slow-%d: 1\r\n" % n):
                closed.add(index)
        if len(closed) == len(socks):
            break
        time.sleep(0.1)
    return closed


def server_closed(sock: socket.socket, line: bytes) -> bool:
    """Whether the server has ended this connection (it never answers a head left open)."""
    try:
        sock.sendall(line)
        sock.setblocking(False)
        try:
            sock.recv(65536)  # the end of the stream, or an answer before it
        except BlockingIOError:
            return False
        finally:
            sock.setblocking(True)
    except OSError:
        pass
    return True


def test_a_body_that_stops_arriving_is_a_408_and_its_connection_is_closed(web, secret):
    """Half a body, then nothing (the connection left open): past WEB_BODY_TIMEOUT_MS the
    server answers 408 in the envelope, closes, and nothing is stored. Behind nginx its own
    client_body_timeout (10 s, deploy/nginx) ends the request first: the app never sees it."""
    body = run_body("stopped-midway")
    data = head(secret, b"Content-Length: %d\r\n\r\n" % len(body)) + body[: len(body) // 2]
    if web.proxied:
        result = exchange(web, data, answers=None, bound=NGINX_BODY_TIMEOUT + BOUND)
        assert result.closed and result.statuses in ([], [408]), result
        assert stored("stopped-midway") == 0
        return
    result = exchange(web, data, answers=None)  # read until the server closes (or BOUND)
    assert result.statuses == [408] and result.closed, result
    envelope = result.answers[0].envelope()
    assert envelope["failure_type"] == "timeout" and envelope["retryable"] is True
    assert stored("stopped-midway") == 0


def test_clients_stalling_mid_body_do_not_starve_the_server(web, secret):
    stalled = [socket.create_connection(web.address, timeout=BOUND) for _ in range(12)]
    try:
        for sock in stalled:
            sock.sendall(head(secret, b"Content-Length: 100\r\n\r\n") + b'{"status"')
        time.sleep(0.5)  # each is read in by a thread that now waits for the rest of its body
        answer = httpx.post(
            f"{web.url}/api/v1/runs",
            json=ok_run(topic="beside-stalled-bodies"),
            headers={"Authorization": f"Bearer {secret}"},
            timeout=30,
        )
    finally:
        for sock in stalled:
            sock.close()
    assert answer.status_code == 201, answer.text
