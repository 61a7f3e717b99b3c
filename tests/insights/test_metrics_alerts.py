"""/metrics (token or allow-list) and webhook alerts delivered to a real local HTTP server."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.urls import reverse
from django.utils import timezone

from insights.alerts import DELIVER_TASK, MAX_DELIVERY_ATTEMPTS, RETRY_BASE_DELAY, retry_delay
from insights.models import AlertDelivery, AlertRule
from insights.stats import refresh_rollups
from insights.tasks import deliver_alert, evaluate_alerts
from orchestrator.models import OutboxMessage, SourceHealth

from .conftest import ago, make_failure, make_review, make_run

METRICS = reverse("metrics")


def test_metrics_need_the_token_or_an_allowed_address(client, db, settings):
    settings.METRICS_TOKEN = "s3cret"
    settings.METRICS_ALLOWED_IPS = ["10.0.0.5"]
    assert client.get(METRICS, REMOTE_ADDR="192.0.2.1").status_code == 403
    bad = client.get(METRICS, REMOTE_ADDR="192.0.2.1", HTTP_AUTHORIZATION="Bearer nope")
    assert bad.status_code == 403
    good = client.get(METRICS, REMOTE_ADDR="192.0.2.1", HTTP_AUTHORIZATION="Bearer s3cret")
    assert good.status_code == 200 and good["Content-Type"].startswith("text/plain")
    assert client.get(METRICS, REMOTE_ADDR="10.0.0.5").status_code == 200


def test_metrics_without_a_token_refuse_bearer_guesses(client, db, settings):
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOWED_IPS = []
    assert client.get(METRICS, HTTP_AUTHORIZATION="Bearer ").status_code == 403


def test_metrics_report_runs_reviews_and_breakers(client, db, settings):
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1"]
    make_failure("timeout", source="news_api", created_at=ago(hours=3))
    make_run(source='we"ird\nsource')
    refresh_rollups(timezone.now() - timedelta(hours=5))
    make_review()
    SourceHealth.objects.create(source="news_api", breaker_state="open")
    body = client.get(METRICS).content.decode()
    assert (
        'failsight_runs_total{status="failed",failure_type="timeout",source="news_api"} 1' in body
    )
    assert 'source="we\\"ird\\nsource"' in body
    assert "failsight_review_open 1" in body
    assert 'failsight_futile_retries_total{source="news_api"} 0' in body
    assert 'failsight_breaker_state{source="news_api",state="open"} 1' in body
    assert 'failsight_breaker_state{source="news_api",state="closed"} 0' in body


def test_metrics_count_retries_spent_on_failures_that_said_no(client, db, settings):
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1"]
    for created in (ago(hours=3), ago(minutes=1)):  # one folded hour, one live
        make_failure(
            "server_fault",
            source="news_api",
            retryable=False,
            decision="retry",
            created_at=created,
        )
    refresh_rollups(timezone.now() - timedelta(hours=5))
    body = client.get(METRICS).content.decode()
    assert 'failsight_futile_retries_total{source="news_api"} 2' in body


class Receiver(BaseHTTPRequestHandler):
    status = 200
    received: list = []

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        type(self).received.append(json.loads(self.rfile.read(length)))
        self.send_response(type(self).status)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    Receiver.status, Receiver.received = 200, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


def rule(url: str, **fields) -> AlertRule:
    fields.setdefault("name", "timeouts")
    fields.setdefault("kind", AlertRule.Kind.FAILURE_RATE)
    fields.setdefault("failure_type", "timeout")
    fields.setdefault("threshold", 0.5)
    return AlertRule.objects.create(url=url, **fields)


def test_a_delivery_posts_the_payload_and_records_the_answer(db, receiver):
    _, url = receiver
    delivery = AlertDelivery.objects.create(rule=rule(url), payload={"alert": "timeouts"})
    assert deliver_alert(delivery.pk) == "sent"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.response_code, delivery.attempts) == ("sent", 200, 1)
    assert Receiver.received == [{"alert": "timeouts"}]
    assert deliver_alert(delivery.pk) == "skipped"  # never sent twice


def next_try(delivery: AlertDelivery) -> OutboxMessage:
    """The outbox message that will try `delivery` again (exactly one)."""
    return OutboxMessage.objects.get(task=DELIVER_TASK, args=[delivery.pk])


def test_a_server_error_is_recorded_and_tried_again_later_through_the_outbox(db, receiver):
    _, url = receiver
    Receiver.status = 503
    delivery = AlertDelivery.objects.create(rule=rule(url), payload={})
    before = timezone.now()
    assert deliver_alert(delivery.pk) == "failed"
    delivery.refresh_from_db()
    assert (delivery.status, delivery.response_code, delivery.attempts) == ("failed", 503, 1)
    wait = (next_try(delivery).available_at - before).total_seconds()
    assert RETRY_BASE_DELAY / 2 <= wait <= RETRY_BASE_DELAY + 1  # later, not in a countdown


def test_an_unreachable_receiver_is_recorded_and_given_up_after_the_last_attempt(db, receiver):
    server, url = receiver
    server.shutdown()
    server.server_close()
    delivery = AlertDelivery.objects.create(
        rule=rule(url), payload={}, attempts=MAX_DELIVERY_ATTEMPTS - 2
    )
    assert deliver_alert(delivery.pk) == "failed"
    delivery.refresh_from_db()
    assert delivery.status == "failed" and "ConnectError" in delivery.error
    next_try(delivery).delete()
    assert deliver_alert(delivery.pk) == "failed"  # the last attempt
    assert not OutboxMessage.objects.filter(task=DELIVER_TASK).exists()


def test_the_delays_between_tries_double_up_to_five_minutes():
    for attempts, ceiling in [(1, 5), (2, 10), (3, 20), (7, 300), (20, 300)]:
        assert ceiling / 2 <= retry_delay(attempts) <= ceiling


def test_a_client_error_is_final(db, receiver):
    _, url = receiver
    Receiver.status = 410
    delivery = AlertDelivery.objects.create(rule=rule(url), payload={})
    assert deliver_alert(delivery.pk) == "failed"
    delivery.refresh_from_db()
    assert delivery.response_code == 410


def test_rules_fire_once_per_cooldown(db, receiver, django_capture_on_commit_callbacks):
    _, url = receiver
    for _ in range(3):
        make_failure("timeout")
    make_run()
    quiet = rule(url, name="auth", failure_type="auth_failure")
    loud = rule(url)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert evaluate_alerts() == 1
        assert evaluate_alerts() == 0  # cooling down
    assert len(callbacks) == 1
    delivery = AlertDelivery.objects.get()
    assert delivery.rule == loud and delivery.payload["value"] == 0.75
    assert not quiet.deliveries.exists()


def test_review_age_rules(db, receiver, django_capture_on_commit_callbacks):
    _, url = receiver
    rule(url, kind=AlertRule.Kind.REVIEW_AGE, failure_type="", threshold=3600)
    with django_capture_on_commit_callbacks(execute=False):
        make_review(created_at=ago(minutes=10))
        assert evaluate_alerts() == 0
        oldest = make_review(created_at=ago(hours=2))
        assert evaluate_alerts() == 1
    payload = AlertDelivery.objects.get().payload
    assert payload["open_review_items"] == 2
    assert payload["oldest_review_path"] == f"/review/{oldest.pk}/"  # its own page, to claim


def test_every_beat_entry_names_a_registered_task():
    from django.conf import settings

    from config.celery import app

    app.loader.import_default_modules()
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        assert entry["task"] in app.tasks
