"""Fail fast while the database is down: the real web process (as shipped, DEBUG off, the pooled
connection of production) on a private PostgreSQL that the test stops and starts again.

Every request is answered while the server is down (a 503 envelope with Retry-After for the API,
a 503 page for the dashboard) before a client's short timeout, and the first requests after it
is back succeed: the pool replaced the connections the stop broke.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.api.helpers import ENVELOPE_KEYS, ok_run
from tests.conftest import require_service
from tests.services import (
    PrivatePostgres,
    app_env,
    available,
    manage,
    start_web,
    wait_until,
)

# Serial: answers are due before a client's timeout, and stored again within 10 s of the restart.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

# A client's timeout: a request held until the database answers (or the operating system gives
# up on it) would run past it; the server's own limits answer within a few seconds.
CLIENT_TIMEOUT = 15.0  # seconds


@dataclass
class Web:
    base_url: str
    token: str
    postgres: PrivatePostgres


@pytest.fixture(scope="module")
def web(tmp_path_factory) -> Iterator[Web]:
    require_service(available(), "PostgreSQL's server programs and redis-server")
    var = tmp_path_factory.mktemp("database-down")
    postgres = PrivatePostgres().init()
    server = None
    try:
        url = postgres.create_database("failsight_down")
        # No broker is needed for these requests; the cache is local memory (throttle per process).
        env = app_env(url, "redis://127.0.0.1:1/0", "", var)
        env |= {"DATABASE_POOL_MAX": "4", "SECURE_COOKIES": "0"}  # plain HTTP here
        manage(env, "migrate", "--noinput")
        token = manage(env, "createtoken", "down-test")
        server, url = start_web(env, var / "web.log", WEB_CONCURRENCY="1", WEB_THREADS="4")
        yield Web(url, token, postgres)
    finally:
        if server is not None:
            server.stop()
        postgres.remove()


def post_run(web: Web, key: str) -> tuple[httpx.Response, float]:
    began = time.monotonic()
    response = httpx.post(
        f"{web.base_url}/api/v1/runs",
        json=ok_run(),
        headers={"Authorization": f"Bearer {web.token}", "Idempotency-Key": key},
        timeout=CLIENT_TIMEOUT,
    )
    return response, time.monotonic() - began


def sign_in_form(browser: httpx.Client) -> dict[str, str]:
    """The sign-in form's fields with its CSRF token (the page itself needs no database)."""
    page = browser.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    return {"csrfmiddlewaretoken": token, "username": "nobody", "password": "wrong-password"}


def test_requests_fail_fast_with_a_503_while_the_database_is_down_and_recover(web):
    stored, _ = post_run(web, "before")
    assert stored.status_code == 201, stored.text
    browser = httpx.Client(base_url=web.base_url, timeout=CLIENT_TIMEOUT)
    form = sign_in_form(browser)

    web.postgres.stop("immediate")  # a crash: every pooled connection is cut
    try:
        timings = []
        for n in range(4):  # the first ones find broken pooled connections, later ones none
            response, took = post_run(web, f"during-{n}")
            timings.append(took)
            assert response.status_code == 503, response.text
            body = response.json()
            assert set(body) == ENVELOPE_KEYS and body["failure_type"] == "server_fault"
            assert int(response.headers["Retry-After"]) >= 1
        began = time.monotonic()
        page = browser.post("/accounts/login/", data=form, headers={"Referer": web.base_url})
        timings.append(time.monotonic() - began)
        assert page.status_code == 503 and "Retry-After" in page.headers  # not a 500 page
        assert "database is unavailable" in page.text
    finally:
        web.postgres.start()

    back = time.monotonic()
    recovered = wait_until(lambda: answered(post_run(web, "after")[0]), 10, "a stored run")
    took_back = time.monotonic() - back
    assert recovered.status_code == 201, recovered.text
    replay, _ = post_run(web, "before")  # stored before the outage, still there
    assert replay.status_code == 201 and replay.json()["id"] == stored.json()["id"]
    answers = ", ".join(f"{t:.2f} s" for t in timings)
    print(f"answers while the database was down: {answers}; stored again {took_back:.1f} s after")


def answered(response: httpx.Response) -> httpx.Response | None:
    return response if response.status_code != 503 else None
