"""The WSGI application the web server serves (`config.wsgi`): what a request's environ holds."""

from __future__ import annotations

import os

from config.wsgi import without_process_environment


def test_a_request_sees_none_of_the_process_environment(monkeypatch):
    monkeypatch.setenv("SECRET_KEY", "not-for-requests")
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid")
    seen: dict = {}

    def app(environ, start_response):
        seen.update(environ)
        return [b""]

    wsgi = without_process_environment(app)
    # As granian builds it: the process's environment, then the request's own names on top.
    request = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "HTTP_HOST": "example.org"}
    wsgi(dict(os.environ) | request, lambda *args: None)
    assert "SECRET_KEY" not in seen and "PATH" not in seen
    assert seen["PATH_INFO"] == "/" and seen["HTTP_HOST"] == "example.org"
    assert "HTTP_PROXY" in seen  # a header's name is kept: it cannot be told from a header
