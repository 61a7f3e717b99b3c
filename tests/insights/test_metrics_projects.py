"""/metrics is the whole deployment's: a browser reads it only as staff who may see every project,
and a scraper with the token reads every project's figures."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from orchestrator.models import Project

METRICS = "/metrics"

pytestmark = pytest.mark.django_db


@pytest.fixture
def kept_project(settings) -> Project:
    settings.METRICS_TOKEN = "s3cret"
    settings.METRICS_ALLOWED_IPS = []
    project = Project.objects.create(slug="kept", name="Kept")
    project.groups.add(Group.objects.create(name="kept team"))
    return project


def staff_client() -> tuple[Client, User]:
    user = User.objects.create_user("stella", password="stella-pass-123", is_staff=True)
    client = Client()
    client.force_login(user)
    return client, user


def test_staff_kept_from_a_project_is_refused_and_told_why(kept_project):
    client, _ = staff_client()
    refused = client.get(METRICS)
    text = refused.content.decode()
    assert refused.status_code == 403 and "failsight_" not in text
    assert "You are signed in as stella, who may not see every project." in text


def test_staff_who_may_see_every_project_reads_every_projects_figures(kept_project):
    client, user = staff_client()
    user.groups.add(kept_project.groups.get())
    page = client.get(METRICS).content.decode()
    assert 'failsight_review_open{project="kept"} 0' in page
    assert 'failsight_review_open{project="default"} 0' in page


def test_the_token_reads_every_projects_figures(kept_project, client):
    page = client.get(METRICS, HTTP_AUTHORIZATION="Bearer s3cret").content.decode()
    assert 'failsight_review_open{project="kept"} 0' in page
