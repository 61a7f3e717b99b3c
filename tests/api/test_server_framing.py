"""What the web worker (`config.server`) reads of a request it refuses before parsing: only one
whole, ordinary HTTP/1.x request qualifies (anything else goes through gunicorn's parser), and
only on a connection whose parser holds nothing of a request yet. Read with gunicorn's real parser
over a real socket pair."""

from __future__ import annotations

import socket

import pytest
from gunicorn.config import Config
from gunicorn.http.parser import RequestParser

from config.server import RequestHead, complete_request, nothing_buffered

BODY = b'{"status": "ok", "agent": "a", "source": "s"}'


def request(
    *headers: str, body: bytes = BODY, line: str = "POST /api/v1/runs HTTP/1.1", length=True
) -> bytes:
    lines = [line, "Host: 127.0.0.1", *headers]
    if length:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def test_a_whole_request_is_read_with_its_method_path_and_keep_alive():
    head = complete_request(request("Authorization: Bearer x"))
    assert head == RequestHead("POST", "/api/v1/runs", keep_alive=True)
    query = complete_request(request(line="GET /runs/?status=failed HTTP/1.1", body=b""))
    assert query == RequestHead("GET", "/runs/", keep_alive=True)


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
    head = complete_request(request(line="GET /api/v1/runs HTTP/1.1", body=b"", length=False))
    assert head == RequestHead("GET", "/api/v1/runs", keep_alive=True)


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
