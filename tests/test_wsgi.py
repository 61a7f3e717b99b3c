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


def test_the_served_process_freezes_its_loaded_heap_out_of_the_collectors_reach():
    """In a fresh process, as the web server loads it: once `config.wsgi` is imported, the
    URLconf (and with it every view and the API) is loaded and the objects alive then are
    frozen (`gc.freeze`), so full collections no longer walk Django and the apps each time;
    an object made afterwards is still collected."""
    import subprocess
    import sys

    probe = (
        "import gc, sys\n"
        "before = gc.get_freeze_count()\n"
        "import config.wsgi\n"
        "frozen = gc.get_freeze_count()\n"
        "class Cycle: pass\n"
        "a = Cycle(); a.me = a; del a\n"
        "print(before, frozen, 'config.urls' in sys.modules, gc.collect() >= 1)\n"
    )
    env = os.environ | {"DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    before, frozen, urls_loaded, collected = done.stdout.split()
    assert int(before) == 0 and int(frozen) > 100_000, done.stdout
    assert urls_loaded == "True" and collected == "True"
