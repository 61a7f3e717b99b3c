"""The one webhook deliverer, with resolutions POSTed to a token's callback URL: signed, recorded
per attempt, retried with the delay in the outbox (one backoff policy), a client error final,
acked once. The delivery task's body runs here against a real HTTP receiver on this machine;
test_agent_loop_live.py runs it in a real worker (alerts: tests/insights/test_metrics_alerts.py)."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import call_command
from django.utils import timezone

from orchestrator.client import verify_signature
from orchestrator.coordination import webhooks
from orchestrator.coordination.actions import do_resolve_review
from orchestrator.models import (
    ApiToken,
    AuditEntry,
    OutboxMessage,
    ReviewItem,
    Run,
    WebhookAttempt,
    WebhookDelivery,
)
from orchestrator.vocabulary import Channel


class Receiver:
    """A real HTTP server answering each POST with the next status of `answers` (then 200)."""

    def __init__(self, answers: list[int]) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((dict(self.headers), body))
                status = receiver.answers.pop(0) if receiver.answers else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        # shutdown() waits for the loop's next poll: half a second at the default interval.
        serve = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        serve.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver([500])
    yield r
    r.close()


def resolved_item(token: ApiToken, operator) -> ReviewItem:
    run = Run.objects.create(
        agent="a", source="crm", status=Run.Status.FAILED, failure_type="auth_failure", token=token
    )
    item = ReviewItem.objects.create(run=run, reason="key expired", failure_type="auth_failure")
    do_resolve_review(
        item,
        operator,
        "retry_edited",
        channel=Channel.DASHBOARD,
        note="new key",
        edited_input={"account": "acme-2"},
    )
    item.refresh_from_db()
    return item


def test_createtoken_prints_a_signing_secret_once_and_keeps_it_sealed(db):
    out = io.StringIO()
    call_command("createtoken", "crm-agent", "--callback", "https://agent.example/hook", stdout=out)
    secret, signing = out.getvalue().split()
    token = ApiToken.objects.authenticate(secret)
    assert token.callback_url == "https://agent.example/hook"
    assert signing.startswith("whsec_") and signing not in token.sealed_signing_secret
    assert token.signing_secret() == signing
    assert AuditEntry.objects.filter(action="apitoken.callback", object_id=str(token.pk)).exists()


def test_a_resolution_is_delivered_signed_after_a_500_with_the_delay_in_the_outbox(
    db, operator, receiver, settings
):
    token, _ = ApiToken.issue("crm-agent")
    signing = token.set_callback(receiver.url)
    item = resolved_item(token, operator)
    hook = WebhookDelivery.objects.get(item=item)
    message = OutboxMessage.objects.get(task=webhooks.DELIVER_TASK)
    assert message.args == [hook.pk]

    assert webhooks.deliver(hook.pk) == "retrying"  # the receiver answered 500
    retry = OutboxMessage.objects.filter(task=webhooks.DELIVER_TASK).order_by("-pk").first()
    wait = (retry.available_at - retry.created_at).total_seconds()
    base = settings.WEBHOOK_BACKOFF_SECONDS
    assert base / 2 - 0.5 <= wait <= base + 0.5  # later, in the outbox, not in a countdown
    assert webhooks.deliver(hook.pk) == "delivered"
    assert webhooks.deliver(hook.pk) == "skipped"  # a duplicate message changes nothing

    (h1, _), (h2, b2) = receiver.requests
    assert h1["Failsight-Delivery"] == h2["Failsight-Delivery"] == str(hook.delivery_id)
    assert verify_signature(signing, h2["Failsight-Signature"], b2)
    assert not verify_signature("whsec_wrong", h2["Failsight-Signature"], b2)
    assert b'"input":{"account":"acme-2"}' in b2 and h2["Failsight-Event"] == "review.resolved"
    attempts = list(WebhookAttempt.objects.filter(delivery=hook).order_by("number"))
    assert [(a.status_code, a.acked) for a in attempts] == [(500, False), (200, True)]
    item.refresh_from_db()
    assert item.delivered_via == "webhook" and item.delivered_at is not None


def test_a_second_2xx_for_one_resolution_is_never_a_second_ack(db, operator, receiver):
    token, _ = ApiToken.issue("crm-agent")
    token.set_callback(receiver.url)
    hook = WebhookDelivery.objects.get(item=resolved_item(token, operator))
    now = timezone.now()
    first = hook.begin_attempt("host:1", now, now + timedelta(seconds=30))
    # A second attempt after the first's lease ran out: its worker seemed dead, it was not.
    later = now + timedelta(seconds=60)
    second = hook.begin_attempt("host:2", later, later + timedelta(seconds=30))
    assert (first, second) == (1, 2)
    assert hook.succeed(second, 200, later) is True
    assert hook.succeed(first, 204, later) is False  # the unique constraint: one ack
    assert WebhookAttempt.objects.filter(delivery=hook, acked=True).count() == 1


def test_a_delivery_whose_worker_died_is_sent_again_by_the_sweeper(db, operator, receiver):
    token, _ = ApiToken.issue("crm-agent")
    token.set_callback(receiver.url)
    hook = WebhookDelivery.objects.get(item=resolved_item(token, operator))
    OutboxMessage.objects.all().delete()
    now = timezone.now()
    assert hook.begin_attempt("elsewhere:1", now, now + timedelta(seconds=15)) == 1
    assert webhooks.resend_stalled(now) == 0  # its lease still runs
    later = now + timedelta(seconds=16)
    assert webhooks.resend_stalled(later) == 1
    assert webhooks.resend_stalled(later) == 0  # claimed for one resend window
    assert OutboxMessage.objects.filter(task=webhooks.DELIVER_TASK).count() == 1


def test_an_agent_without_a_callback_or_a_built_in_item_gets_no_webhook(db, operator):
    token, _ = ApiToken.issue("polling-agent")
    resolved_item(token, operator)
    assert not WebhookDelivery.objects.exists()


def test_a_resolution_acknowledged_over_the_api_first_is_not_posted_again(db, operator, receiver):
    token, _ = ApiToken.issue("crm-agent")
    token.set_callback(receiver.url)
    item = resolved_item(token, operator)
    item.acknowledge("ack")
    hook = WebhookDelivery.objects.get(item=item)
    assert webhooks.deliver(hook.pk) == "superseded"
    hook.refresh_from_db()
    assert hook.state == WebhookDelivery.State.SUPERSEDED and receiver.requests == []


def hook_to(url: str) -> WebhookDelivery:
    return webhooks.queue(WebhookDelivery.Event.ALERT_FIRED, url, {"alert": "x"}, "")


@pytest.mark.parametrize(
    ("status", "outcome"),
    [(410, "given up"), (400, "given up"), (429, "retrying"), (503, "retrying")],
)
def test_a_client_error_is_final_unless_it_says_later(db, status, outcome):
    receiver = Receiver([status])
    try:
        hook = hook_to(receiver.url)
        assert webhooks.deliver(hook.pk) == outcome
    finally:
        receiver.close()
    hook.refresh_from_db()
    assert hook.tries.get().status_code == status and str(status) in hook.last_error


def test_an_unreachable_receiver_is_given_up_after_the_last_attempt(db, settings):
    settings.WEBHOOK_MAX_ATTEMPTS = 2
    receiver = Receiver([])
    url = receiver.url
    receiver.close()
    hook = hook_to(url)
    assert webhooks.deliver(hook.pk) == "retrying"
    assert webhooks.deliver(hook.pk) == "given up"
    hook.refresh_from_db()
    assert hook.state == WebhookDelivery.State.FAILED and "ConnectError" in hook.last_error
    assert [t.status_code for t in hook.tries.all()] == [None, None]


def test_the_delays_between_attempts_double_up_to_the_cap_less_up_to_half(settings):
    settings.WEBHOOK_BACKOFF_SECONDS, settings.WEBHOOK_BACKOFF_MAX_SECONDS = 5, 300
    for attempt, ceiling in [(1, 5), (2, 10), (3, 20), (7, 300), (20, 300)]:
        delays = [webhooks.backoff(attempt) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 1  # spread, so that retries to one receiver do not bunch
