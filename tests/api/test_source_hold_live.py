"""Agents' failures reach the source's breaker and Retry-After hold, live: an agent reports over
HTTP to the web server as shipped (`config.serve`, PostgreSQL) and asks for decisions after each
report; an operator then reads the overview over HTTP."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.contrib.auth.models import Group, User

from orchestrator.models import ApiToken, SourceHealth
from tests.api.helpers import web_env
from tests.services import start_web, wait_until

# Serial: the hold's remaining seconds are checked against the wall clock (over 50 of 60).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.serial,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

SOURCE = "flaky_api"


def iso(moment: datetime) -> str:
    return moment.isoformat()


def failed_call(query: int, started: datetime) -> dict:
    """A call to the source answered 503 with a Retry-After of a minute."""
    return {
        "status": "error",
        "failure_type": "server_fault",
        "status_code": 503,
        "retry_after": 60,
        "agent": "researcher",
        "source": SOURCE,
        "attempted": {"query": f"AI impact on topic {query}"},
        "started_at": iso(started),
        "finished_at": iso(datetime.now(UTC)),
    }


def signed_in(url: str, username: str, password: str) -> httpx.Client:
    browser = httpx.Client(base_url=url, timeout=30, follow_redirects=True)
    form = browser.get("/accounts/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    data = {"username": username, "password": password, "csrfmiddlewaretoken": token}
    landed = browser.post("/accounts/login/", data=data, headers={"Referer": f"{url}/"})
    assert landed.status_code == 200 and "/accounts/login/" not in str(landed.url), landed.text
    return browser


def an_operator(username: str, password: str) -> None:
    """An operator the server can sign in: the suite's users have hashes of a hasher only the
    tests enable (fast MD5), so this one has the server's own."""
    hasher = PBKDF2PasswordHasher()
    user = User.objects.create(username=username, password=hasher.encode(password, hasher.salt()))
    user.groups.add(Group.objects.get(name="operators"))


def test_a_hundred_reported_503s_open_the_breaker_hold_the_source_and_count_early_calls(
    postgres, tmp_path
):
    _, secret = ApiToken.issue("flaky-agent")
    an_operator("oona", "operator-pass-456")
    # Plain HTTP on this machine: the operator's cookies must not be HTTPS-only.
    server, url = start_web(web_env(tmp_path, SECURE_COOKIES="0"), tmp_path / "web.log")
    auth = {"Authorization": f"Bearer {secret}"}
    try:
        with httpx.Client(base_url=f"{url}/api/v1", headers=auth, timeout=30) as api:
            in_flight = datetime.now(UTC)  # every call was sent before the first answer came
            actions = []
            for query in range(100):
                run = api.post("/runs", json=failed_call(query, in_flight))
                assert run.status_code == 201, run.text
                decided = api.post("/decisions", json={"run": run.json()["id"]})
                assert decided.status_code == 200, decided.text
                actions.append(decided.json())
            health = SourceHealth.objects.get(source=SOURCE)
            assert (health.breaker_state, health.consecutive_failures) == ("open", 100)
            assert health.not_before > datetime.now(UTC) + timedelta(seconds=50)
            assert [a["action"] for a in actions[:4]] == ["retry"] * 4  # their own Retry-After
            assert {a["action"] for a in actions[4:]} == {"wait"}  # the breaker opened at 5
            assert all(50 < a["delay_seconds"] <= 60 for a in actions[4:])

            # Another query, another failure: the source holds it back too.
            ask = {"failure": {"failure_type": "timeout"}, "attempt": 1, "source": SOURCE}
            asked = api.post("/decisions", json=ask).json()
            assert asked["action"] == "wait" and asked["delay_seconds"] > 50, asked

            # A call the hold should have prevented, whatever its query, is early.
            call = {"status": "ok", "agent": "other-agent", "source": SOURCE, "results": []}
            call |= {"attempted": {"query": "something else"}, "started_at": iso(datetime.now(UTC))}
            early = api.post("/runs", json=call).json()["id"]

            def early_ones() -> list[int]:
                listed = api.get("/runs", params={"set": "early_retries"}).json()["items"]
                return [r["id"] for r in listed]

            # Marked by the source-health feed, off the request path: within a second.
            assert wait_until(early_ones, 1.0, "the early call to be marked") == [early]

        browser = signed_in(url, "oona", "operator-pass-456")
        overview = browser.get("/", params={"window": "1h"}).text
        assert "1 early" in overview
        href = re.search(r'href="([^"]*flag=early[^"]*)"', overview).group(1)
        drilled = browser.get(href.replace("&amp;", "&")).text
        browser.close()
        assert f"/runs/{early}/" in drilled
    finally:
        server.stop()
