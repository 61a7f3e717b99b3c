"""Every webhook is signed the same way, and the verification docs/api.md shows is the truth: a
review resolution and a fired alert, each delivered for real to a receiver, carry the same
headers and a `Failsight-Signature` computed by one function with their own secret; the page's
Python snippet and its `openssl` line, run exactly as written there, verify both bodies and refuse
a tampered one or another key."""

from __future__ import annotations

import hashlib
import hmac
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from insights import alerts
from insights.models import AlertDelivery, AlertRule
from orchestrator.coordination import webhooks
from orchestrator.coordination.actions import do_resolve_review
from orchestrator.models import ApiToken, ReviewItem, Run, WebhookDelivery
from orchestrator.vocabulary import Channel
from tests.conftest import require_service
from tests.orchestrator.test_webhooks import Receiver

ROOT = Path(__file__).resolve().parents[2]
SIGNED_HEADERS = {"Content-Type", "User-Agent", "Failsight-Event", "Failsight-Delivery"}


def documented(language: str) -> str:
    """The first `language` block of docs/api.md's "Verifying a signature" section."""
    text = (ROOT / "docs" / "api.md").read_text()
    section = text.split("### Verifying a signature", 1)[1].split("\n## ", 1)[0]
    return re.search(rf"```{language}\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver([])
    yield r
    r.close()


def delivered_review(receiver: Receiver, operator: Any) -> tuple[str, dict[str, str], bytes]:
    token, _ = ApiToken.issue("crm-agent")
    secret = token.set_callback(receiver.url)
    run = Run.objects.create(
        agent="a", source="crm", status=Run.Status.FAILED, failure_type="auth_failure", token=token
    )
    item = ReviewItem.objects.create(run=run, reason="key expired", failure_type="auth_failure")
    do_resolve_review(item, operator, "abort", channel=Channel.DASHBOARD, note="stop")
    hook = WebhookDelivery.objects.get(item=item)
    assert webhooks.deliver(hook.pk) == "delivered"
    headers, body = receiver.requests[-1]
    return secret, headers, body


def delivered_alert(receiver: Receiver) -> tuple[str, dict[str, str], bytes]:
    for _ in range(3):
        Run.objects.create(agent="a", source="s", status=Run.Status.FAILED, failure_type="timeout")
    Run.objects.create(agent="a", source="s", status=Run.Status.SUCCEEDED)
    rule = AlertRule.objects.create(
        name="timeouts",
        kind=AlertRule.Kind.FAILURE_RATE,
        failure_type="timeout",
        threshold=0.5,
        url=receiver.url,
    )
    secret = rule.issue_signing_secret()
    assert alerts.evaluate() == 1
    assert webhooks.deliver(AlertDelivery.objects.get(rule=rule).webhook.pk) == "delivered"
    headers, body = receiver.requests[-1]
    return secret, headers, body


@pytest.fixture
def deliveries(db, operator, receiver) -> dict[str, tuple[str, dict[str, str], bytes]]:
    return {
        "review.resolved": delivered_review(receiver, operator),
        "alert.fired": delivered_alert(receiver),
    }


def signed_parts(header: str) -> tuple[str, str]:
    t, v1 = re.fullmatch(r"t=(\d+),v1=([0-9a-f]{64})", header).groups()
    return t, v1


def test_reviews_and_alerts_are_signed_by_one_function_with_the_same_headers(deliveries):
    for event, (secret, headers, body) in deliveries.items():
        assert secret.startswith("whsec_")
        assert headers["Failsight-Event"] == event
        assert headers.keys() >= SIGNED_HEADERS
        t, v1 = signed_parts(headers["Failsight-Signature"])
        # The key is the whole whsec_… string, as shown; the message "<t>.<body as sent>".
        assert webhooks.signature(secret, int(t), body) == headers["Failsight-Signature"]
        mac = hmac.new(secret.encode(), t.encode() + b"." + body, hashlib.sha256)
        assert mac.hexdigest() == v1
        stripped = secret.removeprefix("whsec_").encode()
        assert hmac.new(stripped, t.encode() + b"." + body, hashlib.sha256).hexdigest() != v1


def test_the_documented_python_snippet_verifies_both_kinds(deliveries):
    namespace: dict[str, Any] = {}
    exec(compile(documented("python"), "docs/api.md", "exec"), namespace)
    verify = namespace["verify"]
    for secret, headers, body in deliveries.values():
        header = headers["Failsight-Signature"]
        assert verify(secret, header, body)
        assert not verify(secret, header, body + b" ")
        assert not verify("whsec_another", header, body)
        t, v1 = signed_parts(header)
        stale = f"t={int(t) - 3600},v1={v1}"
        assert not verify(secret, stale, body)


def test_the_documented_openssl_line_verifies_both_kinds(deliveries, tmp_path):
    require_service(shutil.which("openssl") is not None, "the openssl command")
    line = documented("sh").strip()
    assert "\n" not in line  # one line, as the page says

    def digest(secret: str, t: str, body: bytes) -> str:
        (tmp_path / "body.json").write_bytes(body)
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=tmp_path,
            env={
                "PATH": "/usr/bin:/bin:/usr/local/bin",
                "t": t,
                "FAILSIGHT_WEBHOOK_SECRET": secret,
            },
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout.strip()

    for secret, headers, body in deliveries.values():
        t, v1 = signed_parts(headers["Failsight-Signature"])
        assert digest(secret, t, body) == v1
        assert digest(secret, t, body + b"\n") != v1
        assert digest("whsec_another", t, body) != v1
