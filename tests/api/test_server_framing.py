"""What the web worker (`config.server`) reads of a request it refuses before parsing: only one
whole, ordinary HTTP/1.x request qualifies (anything else goes through gunicorn's parser), and
only on a connection whose parser holds nothing of a request yet. Read with gunicorn's real parser
over a real socket pair."""

from __future__ import annotations

import re
import socket
import time
from types import SimpleNamespace

import pytest
from gunicorn.config import Config
from gunicorn.http.parser import RequestParser
from gunicorn.http.wsgi import base_environ, create

from config.server import ThreadWorker, complete_request, nothing_buffered, report_environ

BODY = b'{"status": "ok", "agent": "a", "source": "s"}'


def request(
    *headers: str, body: bytes = BODY, line: str = "POST /api/v1/runs HTTP/1.1", length=True
) -> bytes:
    lines = [line, "Host: 127.0.0.1", *headers]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def read(data: bytes) -> tuple[str, str, bool] | None:
    head = complete_request(data)
    return None if head is None else (head.method, head.path, head.keep_alive)


def test_a_whole_request_is_read_with_its_method_path_and_keep_alive():
    data = request("Authorization: Bearer x")
    head = complete_request(data)
    assert (head.method, head.path, head.keep_alive) == ("POST", "/api/v1/runs", True)
    assert (head.target, head.version) == (b"/api/v1/runs", b"HTTP/1.1")
    assert dict(head.headers)[b"Authorization"] == b"Bearer x"
    assert data[head.body_at :] == BODY
    query = request(line="GET /runs/?status=failed HTTP/1.1", body=b"")
    assert read(query) == ("GET", "/runs/", True)


@pytest.mark.parametrize(
    "data",
    [
        request(line="POST /api/v1/runs HTTP/1.0"),
        request("Connection: close"),
        request("connection: Keep-Alive, Close"),
    ],
    ids=["http-1.0", "close", "close-in-a-list"],
)
def test_a_client_that_closes_is_not_kept(data):
    head = complete_request(data)
    assert head is not None and head.keep_alive is False


@pytest.mark.parametrize(
    "data",
    [
        request()[:-5],  # the body has not all come
        request()[:20],  # nor the head
        request() + request(),  # two requests: the second is gunicorn's
        request() + b"x",  # more than its Content-Length
        request("Transfer-Encoding: chunked", length=False, body=b"5\r\nhello\r\n0\r\n\r\n"),
        request("Expect: 100-continue", body=b""),
        request("Content-Length: 3"),  # two lengths
        request("Content-Length: -1", length=False, body=b""),
        request(" folded: value"),
        request(line="POST /api/v1/runs HTTP/2.0"),
        request(line="POST http://elsewhere/api/v1/runs HTTP/1.1"),
        request(line="post /api/v1/runs HTTP/1.1"),
        request(line="POST  /api/v1/runs HTTP/1.1"),
    ],
    ids=[
        "partial-body",
        "partial-head",
        "pipelined",
        "trailing-bytes",
        "chunked",
        "expect",
        "two-lengths",
        "bad-length",
        "folded-header",
        "http-2",
        "absolute-form",
        "lower-case-method",
        "two-spaces",
    ],
)
def test_anything_but_one_whole_ordinary_request_goes_the_usual_way(data):
    assert complete_request(data) is None


def test_a_request_without_a_body_needs_no_length():
    no_body = request(line="GET /api/v1/runs HTTP/1.1", body=b"", length=False)
    assert read(no_body) == ("GET", "/api/v1/runs", True)


@pytest.fixture
def sockets():
    left, right = socket.socketpair()
    with left, right:
        yield left, right


def test_a_new_connection_holds_nothing():
    assert nothing_buffered(None)


def test_the_parser_holds_a_request_until_its_body_is_read(sockets):
    client, server = sockets
    parser = RequestParser(Config(), server, ("127.0.0.1", 1))
    assert nothing_buffered(parser)
    client.sendall(request())
    message = next(parser)
    assert not nothing_buffered(parser)  # its body is still to be read
    assert message.body.read(5) == BODY[:5]
    assert not nothing_buffered(parser)
    assert message.body.read() == BODY[5:]
    assert nothing_buffered(parser)


def test_bytes_read_ahead_of_the_next_request_count(sockets):
    client, server = sockets
    parser = RequestParser(Config(), server, ("127.0.0.1", 1))
    client.sendall(request() + request()[:10])  # a pipelined second request, begun
    message = next(parser)
    message.body.read()
    assert not nothing_buffered(parser)  # the parser read the start of the next one


# ---------------------------------------------------------------------------------------------
# The environ of a report served before parsing: the one gunicorn builds for the same bytes


def environs(data: bytes, sockets) -> tuple[dict | None, dict]:
    """(ours, gunicorn's) for the request `data`, read over a real socket pair."""
    client, server = sockets
    cfg = Config()
    conn = SimpleNamespace(sock=server, client=("127.0.0.9", 5555), server=("127.0.0.1", "8000"))
    head = complete_request(data)
    ours = report_environ(data, head, conn, cfg, base_environ(cfg)) if head else None
    client.sendall(data)
    request = next(RequestParser(cfg, server, conn.client))
    _, theirs = create(request, server, conn.client, conn.server, cfg)
    return ours, theirs


def comparable(environ: dict) -> dict:
    objects = {"wsgi.input", "wsgi.errors", "gunicorn.socket", "wsgi.file_wrapper"}
    return {key: value for key, value in environ.items() if key not in objects}


@pytest.mark.parametrize(
    "data",
    [
        request("Authorization: Bearer fs_x", "Idempotency-Key: k-1", "Content-Type: text/json"),
        request("User-Agent: agent/1.0", "Accept: */*", "traceparent: 00-ab-cd-01"),
        request(line="POST /api/v1/runs?dry=1&x=%20y HTTP/1.1"),
        request(line="POST /api/v1/%72uns HTTP/1.0", body=b""),
        request("X-Empty:", "X-Spaced:   padded value  "),
    ],
    ids=["report", "more-headers", "query", "escaped-path", "blank-values"],
)
def test_a_plain_request_gets_the_environ_gunicorn_would_give_it(data, sockets):
    ours, theirs = environs(data, sockets)
    assert ours is not None
    assert comparable(ours) == comparable(theirs)
    assert ours["wsgi.input"].read() == theirs["wsgi.input"].read()


@pytest.mark.parametrize(
    "header",
    [
        "X_Token: sneaky",  # gunicorn drops it (an underscore reads as a hyphen to a WSGI app)
        "X-Forwarded-Proto: https",  # gunicorn decides the scheme by forwarded_allow_ips
        "Forwarded: proto=https",
        "Host: elsewhere",  # a second Host
        "X-Bell: ring\x07",
        "X-Long: " + "v" * 9000,  # over limit_request_field_size
    ],
    ids=["underscore", "forwarded-proto", "forwarded", "two-hosts", "control-char", "long"],
)
def ours(data: bytes, cfg: Config | None = None, client: object = ("127.0.0.9", 5555)):
    cfg = cfg or Config()
    conn = SimpleNamespace(sock=None, client=client, server=("127.0.0.1", "80"))
    head = complete_request(data)
    assert head is not None
    return report_environ(data, head, conn, cfg, base_environ(cfg))


@pytest.mark.parametrize(
    "data",
    [
        request("X_Token: sneaky"),  # gunicorn drops it: an underscore reads as a hyphen to an app
        request("X-Forwarded-Proto: https"),  # gunicorn sets the scheme by forwarded_allow_ips
        request("Forwarded: proto=https"),
        request("Host: elsewhere"),  # a second Host
        request("X-Bell: ring\x07"),
        request("X-Long: " + "v" * 9000),  # over limit_request_field_size
        request(*(f"X-{i}: v" for i in range(101))),  # over limit_request_fields
        request(line=f"POST /api/v1/runs?{'q' * 5000} HTTP/1.1"),  # over limit_request_line
        request(line="POST /api/v1/runs#part HTTP/1.1"),
        b"POST /api/v1/runs HTTP/1.0\r\nContent-Length: 0\r\n\r\n",  # no Host
    ],
    ids=[
        "underscore",
        "forwarded-proto",
        "forwarded",
        "two-hosts",
        "control-char",
        "long-header",
        "many-headers",
        "long-line",
        "fragment",
        "no-host",
    ],
)
def test_a_request_that_is_not_plain_is_left_to_gunicorn(data):
    assert ours(data) is None


def test_the_plain_request_those_are_made_from_is_served():
    assert ours(request()) is not None


def test_a_scheme_header_the_operator_configured_is_left_to_gunicorn():
    cfg = Config()
    cfg.set("secure_scheme_headers", {"X-Scheme": "https"})
    assert ours(request("X-Scheme: https"), cfg) is None
    assert ours(request("X-Scheme: https")) is not None  # not one of gunicorn's by default


def test_a_request_over_a_unix_socket_is_left_to_gunicorn():
    assert ours(request(), client="") is None


def test_refusals_are_logged_at_once_then_once_a_second_and_the_last_by_the_heartbeat(caplog):
    """The worker's count of refusals before parsing (they are not in the access log): the first
    one at once, the rest at most once a second, and those after the last line by the loop's
    heartbeat, even when no refusal follows (a worker that booted less than a second before an
    overload once logged nothing at all). The counting and the log only: no server needed."""
    worker = ThreadWorker.__new__(ThreadWorker)  # gunicorn's constructor wants a whole arbiter
    worker.init_counts()
    caplog.set_level("INFO", logger="config.server")
    t = time.monotonic()

    def said() -> list[tuple[int, int]]:
        pattern = r"refused \d+ requests before parsing in [\d.]+ s \((\d+) at the door, (\d+) "
        found = [re.search(pattern, r.getMessage()) for r in caplog.records]
        return [(int(m[1]), int(m[2])) for m in found if m]

    worker._note_refusal("thread", t)
    assert said() == [(0, 1)]  # at once
    worker._note_refusal("door", t + 0.1)
    worker._note_refusal("door", t + 0.2)
    assert said() == [(0, 1)]  # not twice within a second
    worker._say_refusals(t + 0.5)  # a heartbeat too soon
    assert said() == [(0, 1)]
    worker._say_refusals(t + 1.1)  # the heartbeat a second on: the two left are said
    assert said() == [(0, 1), (2, 0)]
    worker._say_refusals(t + 5)  # nothing more refused: nothing more said
    assert said() == [(0, 1), (2, 0)]
