"""/metrics labels the families read from runs and review items with their project (read with
prometheus_client's parser): two projects' runs and items count apart, the webhook families carry
no project, and every project has its review gauges."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from insights import observations, slo
from orchestrator.models import Project, ReviewItem

from .conftest import make_failure, make_review, make_run
from .metrics_history import parse

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def token(settings) -> None:
    settings.METRICS_TOKEN = "s3cret"
    cache.delete(slo.CACHE_KEY)


def samples(client) -> dict[tuple, float]:
    response = client.get(reverse("metrics"), HTTP_AUTHORIZATION="Bearer s3cret")
    assert response.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in parse(response.content.decode()).values()
        for s in family.samples
    }


def test_runs_and_review_items_count_per_project(client):
    acme = Project.objects.create(slug="acme", name="Acme")
    an_hour_ago = timezone.now() - timedelta(hours=1)
    for project in (acme, acme, None):
        extra = {"project": project} if project else {}
        make_failure("timeout", decision="retry", decided_at=an_hour_ago, **extra)
    make_run(project=acme, duration_ms=1500, agent="researcher", source="web_search")
    make_review(make_failure("unclassified", project=acme), project=acme)
    ReviewItem.objects.update(created_at=timezone.now() - timedelta(minutes=10))
    observations.fold()
    found = samples(client)
    decided = "failsight_decisions_total"
    labels = {"action": "retry", "failure_type": "timeout"}
    assert found[decided, tuple(sorted((labels | {"project": "acme"}).items()))] == 2
    assert found[decided, tuple(sorted((labels | {"project": "default"}).items()))] == 1
    duration = (("agent", "researcher"), ("project", "acme"), ("source", "web_search"))
    assert found["failsight_run_duration_seconds_count", duration] == 1
    assert found["failsight_review_open", (("project", "acme"),)] == 1
    assert found["failsight_review_open", (("project", "default"),)] == 0
    assert 590 <= found["failsight_review_oldest_age_seconds", (("project", "acme"),)] <= 660
    assert found["failsight_review_oldest_age_seconds", (("project", "default"),)] == 0
    # A histogram with nothing observed yet has a zero series per project from the start.
    claim = "failsight_review_time_to_claim_seconds_count"
    assert found[claim, (("project", "acme"),)] == found[claim, (("project", "default"),)] == 0
    assert not any(
        name.startswith("failsight_webhook") and dict(labels).get("project") is not None
        for name, labels in found
    )


def test_an_alert_rule_watches_its_projects_runs_and_review_items(db):
    from insights.models import AlertDelivery, AlertRule
    from insights.tasks import evaluate_alerts

    acme = Project.objects.create(slug="acme", name="Acme")
    for _ in range(3):
        make_failure("timeout", project=acme)
    make_run()  # the default project's: all it has is a success
    make_review(make_failure("unclassified", project=acme), project=acme)
    ReviewItem.objects.update(created_at=timezone.now() - timedelta(hours=2))
    url = "https://alerts.example.org/hook"
    kinds = {"kind": AlertRule.Kind.FAILURE_RATE, "failure_type": "timeout", "threshold": 0.5}
    ages = {"kind": AlertRule.Kind.REVIEW_AGE, "threshold": 3600}
    AlertRule.objects.create(name="acme timeouts", url=url, project=acme, **kinds)
    AlertRule.objects.create(name="default timeouts", url=url, **kinds)
    AlertRule.objects.create(name="acme reviews", url=url, project=acme, **ages)
    AlertRule.objects.create(name="default reviews", url=url, **ages)
    assert evaluate_alerts() == 2
    fired = {d.rule.name: d.webhook.payload for d in AlertDelivery.objects.select_related("rule")}
    assert set(fired) == {"acme timeouts", "acme reviews"}
    assert fired["acme timeouts"]["project"] == "acme" and fired["acme timeouts"]["value"] == 0.75
    assert fired["acme reviews"]["open_review_items"] == 1
