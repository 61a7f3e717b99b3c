"""Secure by default: /metrics needs its token unless an allow-list is set, forwarded addresses
count only from trusted proxies, sign-in is throttled and locked (and audited), and `check
--deploy` passes with the production settings of docs/deployment.md, and fails without a shared
cache."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import RequestFactory
from django.urls import reverse

from orchestrator.addresses import address_in, client_ip
from orchestrator.models import AuditEntry

ROOT = Path(__file__).resolve().parents[2]
METRICS = reverse("metrics")
LOGIN = reverse("login")


# ---------------------------------------------------------------------------------------------
# /metrics and client addresses


def test_by_default_metrics_need_the_token_even_from_localhost(client, db, settings):
    settings.METRICS_TOKEN = "s3cret"
    assert settings.METRICS_ALLOWED_IPS == []  # the default: no address is trusted
    assert client.get(METRICS, REMOTE_ADDR="127.0.0.1").status_code == 403
    assert client.get(METRICS, REMOTE_ADDR="::1").status_code == 403
    ok = client.get(METRICS, REMOTE_ADDR="127.0.0.1", HTTP_AUTHORIZATION="Bearer s3cret")
    assert ok.status_code == 200


def test_without_a_token_nor_an_allow_list_metrics_are_closed(client, db, settings):
    settings.METRICS_TOKEN = ""
    assert client.get(METRICS, REMOTE_ADDR="127.0.0.1").status_code == 403
    assert client.get(METRICS, HTTP_AUTHORIZATION="Bearer ").status_code == 403


def test_a_forwarded_address_counts_only_from_a_trusted_proxy(client, db, settings):
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOWED_IPS = ["10.1.0.0/16"]
    settings.TRUSTED_PROXIES = ["127.0.0.1"]
    forwarded = {"HTTP_X_FORWARDED_FOR": "10.1.2.3"}
    assert client.get(METRICS, REMOTE_ADDR="127.0.0.1", **forwarded).status_code == 200
    assert client.get(METRICS, REMOTE_ADDR="192.0.2.9", **forwarded).status_code == 403
    # A client writing the header itself: the proxy appends the address it saw, read from the right.
    spoofed = {"HTTP_X_FORWARDED_FOR": "10.1.2.3, 198.51.100.7"}
    assert client.get(METRICS, REMOTE_ADDR="127.0.0.1", **spoofed).status_code == 403
    # A wrong token is refused even from an allowed address.
    wrong = {"HTTP_AUTHORIZATION": "Bearer guess"}
    assert client.get(METRICS, REMOTE_ADDR="127.0.0.1", **forwarded, **wrong).status_code == 403


@pytest.mark.parametrize(
    ("remote", "forwarded", "trusted", "expected"),
    [
        ("198.51.100.7", "", [], "198.51.100.7"),
        ("198.51.100.7", "10.0.0.1", [], "198.51.100.7"),  # nobody trusted: header ignored
        ("10.0.0.2", "203.0.113.5", ["10.0.0.0/8"], "203.0.113.5"),
        ("10.0.0.2", "203.0.113.5, 10.0.0.9", ["10.0.0.0/8"], "203.0.113.5"),  # two proxies
        ("10.0.0.2", "1.2.3.4, 203.0.113.5", ["10.0.0.0/8"], "203.0.113.5"),  # forged left part
        ("10.0.0.2", "10.0.0.3", ["10.0.0.0/8"], "10.0.0.3"),  # only proxies: the first hop
        ("::1", "2001:db8::5", ["::1"], "2001:db8::5"),
    ],
)
def test_the_client_address_reads_forwarded_hops_from_the_right(
    settings, remote, forwarded, trusted, expected
):
    settings.TRUSTED_PROXIES = trusted
    request = RequestFactory().get("/", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded)
    assert client_ip(request) == expected


def test_addresses_match_networks_of_their_own_family():
    assert address_in("10.9.8.7", ["10.0.0.0/8"])
    assert not address_in("10.9.8.7", ["::1", "192.0.2.0/24"])
    assert not address_in("not an address", ["0.0.0.0/0"])


# ---------------------------------------------------------------------------------------------
# Sign-in throttling


def sign_in(client, username: str, password: str, address: str = "192.0.2.10"):
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address)


def test_wrong_passwords_lock_the_name_from_that_address_even_for_the_right_one(
    client, operator, settings
):
    for _ in range(25):
        refused = sign_in(client, "olga", "wrong-password")
        assert refused.status_code in (200, 429)
    locked = sign_in(client, "olga", "operator-pass-123")
    assert locked.status_code == 429
    assert b"Sign-in locked" in locked.content
    assert "_auth_user_id" not in client.session  # the right password did not sign in
    assert client.get(reverse("dashboard:overview")).status_code == 302  # to the sign-in page
    entries = AuditEntry.objects.filter(action="auth.lockout")
    assert entries.count() == 1  # once, when the limit was crossed, not at every attempt
    entry = entries.get()
    assert (entry.actor_label, entry.object_id) == ("olga", "olga")
    assert entry.after == {"address": "192.0.2.10", "failures": settings.AXES_FAILURE_LIMIT}


def test_the_lockout_needs_the_limit_and_spares_other_addresses(client, operator, settings):
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        sign_in(client, "olga", "wrong-password")
    assert sign_in(client, "olga", "operator-pass-123").status_code == 302  # below the limit
    client.logout()
    for _ in range(settings.AXES_FAILURE_LIMIT):
        sign_in(client, "olga", "wrong-password")
    assert sign_in(client, "olga", "operator-pass-123").status_code == 429
    elsewhere = sign_in(client, "olga", "operator-pass-123", address="198.51.100.20")
    assert elsewhere.status_code == 302  # the lock is for that name from that address


# ---------------------------------------------------------------------------------------------
# check --deploy


def documented_production_settings() -> dict[str, str]:
    """The variables docs/deployment.md's "Scaling out" section exports, placeholders filled in."""
    readme = (ROOT / "docs" / "deployment.md").read_text()
    section = readme.split("## Scaling out", 1)[1]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    found: dict[str, str] = {}
    for line in block.splitlines():
        if line.startswith("export "):
            for name, value in re.findall(r"(\w+)=(\S+)", line):
                found[name] = value.replace("…", secrets.token_urlsafe(48))
    return found


def check_deploy(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    base = {"PATH": "/usr/bin:/bin", "FAILSIGHT_VAR_DIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=base | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_check_deploy_is_clean_with_the_documented_production_settings(tmp_path):
    env = documented_production_settings()
    assert env["DEBUG"] == "0" and env["SECURE_SSL_REDIRECT"] == "1"
    assert int(env["SECURE_HSTS_SECONDS"]) > 0 and env["SECURE_PROXY_SSL_HEADER"]
    done = check_deploy(env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout


@pytest.mark.slow
def test_check_deploy_fails_when_the_rate_limit_would_count_per_process(tmp_path):
    env = documented_production_settings()
    del env["CACHE_URL"]
    done = check_deploy(env, tmp_path)
    assert done.returncode != 0
    assert "failsight.E001" in done.stderr + done.stdout
    assert "per-process cache" in done.stderr + done.stdout


def test_the_pages_checks_fail_without_csrf_or_clickjacking_middleware(settings):
    from dashboard.checks import pages_protected

    assert pages_protected() == []
    settings.MIDDLEWARE = [
        name
        for name in settings.MIDDLEWARE
        if not name.endswith(("CsrfViewMiddleware", "XFrameOptionsMiddleware"))
    ]
    assert sorted(message.id for message in pages_protected()) == [
        "dashboard.E001",
        "dashboard.E002",
    ]
