"""/metrics (token or allow-list), and alert rules firing once per cool-down, their webhooks
signed and delivered to a real local HTTP server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from insights.models import AlertDelivery, AlertRule
from insights.stats import refresh_rollups
from insights.tasks import evaluate_alerts
from orchestrator.client import verify_signature
from orchestrator.coordination import webhooks
from orchestrator.models import OutboxMessage, SourceHealth
from tests.orchestrator.test_webhooks import Receiver

from .conftest import ago, make_failure, make_review, make_run
from .metrics_history import parse

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


def test_a_signed_in_staff_user_reads_metrics_in_the_browser(admin_client, settings):
    settings.METRICS_TOKEN = "s3cret"
    settings.METRICS_ALLOWED_IPS = []
    response = admin_client.get(METRICS)
    assert response.status_code == 200 and (
        'failsight_review_open{project="default"} 0' in response.content.decode()
    )
    # A wrong token is refused, whoever sends it.
    assert admin_client.get(METRICS, HTTP_AUTHORIZATION="Bearer nope").status_code == 403


def test_a_refusal_says_how_to_get_in_and_shows_no_data(client, operator, settings):
    settings.METRICS_TOKEN = "s3cret"
    settings.METRICS_ALLOWED_IPS = []
    make_review()
    refused = client.get(METRICS)
    text = refused.content.decode()
    assert refused.status_code == 403 and refused["Content-Type"].startswith("text/plain")
    assert "Authorization: Bearer <METRICS_TOKEN>" in text and "METRICS_ALLOWED_IPS" in text
    assert "signing in as a staff user: /accounts/login/?next=/metrics" in text
    assert "failsight_" not in text and "s3cret" not in text
    client.force_login(operator)
    assert "You are signed in as olga, who is not staff." in client.get(METRICS).content.decode()
    guessed = client.get(METRICS, HTTP_AUTHORIZATION="Bearer guess").content.decode()
    assert "The bearer token sent is not the METRICS_TOKEN." in guessed


def test_metrics_report_runs_reviews_and_breakers(client, db, settings):
    settings.METRICS_ALLOWED_IPS = ["127.0.0.1"]
    make_failure("timeout", source="news_api", created_at=ago(hours=3))
    make_run(source='we"ird\nsource')
    refresh_rollups(timezone.now() - timedelta(hours=5))
    make_review()
    SourceHealth.objects.create(source="news_api", breaker_state="open")
    body = client.get(METRICS).content.decode()
    assert 'source="we\\"ird\\nsource"' in body
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in parse(body).values()
        for s in family.samples
    }
    runs = {"status": "failed", "failure_type": "timeout", "source": "news_api"}
    assert samples["failsight_runs_total", tuple(sorted(runs.items()))] == 1
    assert samples["failsight_review_open", (("project", "default"),)] == 1
    assert samples["failsight_futile_retries_total", (("source", "news_api"),)] == 0
    breaker = "failsight_breaker_state"
    assert samples[breaker, (("source", "news_api"), ("state", "open"))] == 1
    assert samples[breaker, (("source", "news_api"), ("state", "closed"))] == 0


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


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver([500])
    yield r
    r.close()


def rule(url: str, **fields) -> AlertRule:
    fields.setdefault("name", "timeouts")
    fields.setdefault("kind", AlertRule.Kind.FAILURE_RATE)
    fields.setdefault("failure_type", "timeout")
    fields.setdefault("threshold", 0.5)
    return AlertRule.objects.create(url=url, **fields)


def test_a_fired_alert_is_posted_signed_with_its_rules_secret_after_a_500(db, receiver):
    for _ in range(3):
        make_failure("timeout")
    make_run()
    secret = rule(receiver.url).issue_signing_secret()
    assert evaluate_alerts() == 1
    hook = AlertDelivery.objects.get().webhook
    assert OutboxMessage.objects.get(task=webhooks.DELIVER_TASK).args == [hook.pk]

    assert webhooks.deliver(hook.pk) == "retrying"  # the receiver answered 500
    assert webhooks.deliver(hook.pk) == "delivered"
    (_, first), (headers, body) = receiver.requests
    assert first == body and json.loads(body)["alert"] == "timeouts"
    assert headers["Failsight-Event"] == "alert.fired"
    assert verify_signature(secret, headers["Failsight-Signature"], body)
    assert not verify_signature("whsec_wrong", headers["Failsight-Signature"], body)
    attempts = hook.tries.order_by("number").values_list("status_code", "acked")
    assert list(attempts) == [(500, False), (200, True)]


def test_a_rule_without_a_secret_posts_unsigned_rather_than_under_an_empty_key(db):
    receiver = Receiver([200])
    try:
        for _ in range(3):
            make_failure("timeout")
        make_run()
        rule(receiver.url)  # created outside the admin: no secret issued yet
        assert evaluate_alerts() == 1
        assert webhooks.deliver(AlertDelivery.objects.get().webhook.pk) == "delivered"
        ((headers, _),) = receiver.requests
        assert "Failsight-Signature" not in headers
        assert headers["Failsight-Event"] == "alert.fired"
    finally:
        receiver.close()


def test_rules_fire_once_per_cooldown(db, receiver, django_capture_on_commit_callbacks):
    url = receiver.url
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
    assert delivery.rule == loud and delivery.webhook.payload["value"] == 0.75
    assert not quiet.deliveries.exists()


def test_review_age_rules(db, receiver, django_capture_on_commit_callbacks):
    rule(receiver.url, kind=AlertRule.Kind.REVIEW_AGE, failure_type="", threshold=3600)
    with django_capture_on_commit_callbacks(execute=False):
        make_review(created_at=ago(minutes=10))
        assert evaluate_alerts() == 0
        oldest = make_review(created_at=ago(hours=2))
        assert evaluate_alerts() == 1
    payload = AlertDelivery.objects.get().webhook.payload
    assert payload["open_review_items"] == 2
    assert payload["oldest_review_path"] == f"/review/{oldest.pk}/"  # its own page, to claim


def test_every_beat_entry_names_a_registered_task():
    from django.conf import settings

    from config.celery import app

    app.loader.import_default_modules()
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        assert entry["task"] in app.tasks
