"""The runs page's lists of names (the source and agent suggestions, and "no name starts with")
name only what the projects the operator may see hold."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.core.cache import cache
from django.urls import reverse

from dashboard import filters
from dashboard.access import PROJECT_SESSION_KEY
from orchestrator.models import DEFAULT_PROJECT_ID, Project

from .conftest import ago, make_run, signed_in


@pytest.fixture
def acme(db) -> Project:
    cache.clear()  # the names are cached per scope for a minute
    project = Project.objects.create(slug="acme", name="Acme")
    project.groups.add(Group.objects.create(name="acme team"))
    make_run(project=project, agent="acme-agent", source="acme_source")
    make_run(agent="default-agent", source="default_source")
    return project


def runs_page(client, **query) -> str:
    return client.get(reverse("dashboard:runs"), query).content.decode()


def test_the_suggestions_name_no_agent_or_source_of_a_project_the_operator_may_not_see(
    operator, acme
):
    page = runs_page(signed_in(operator))
    assert 'value="default_source"' in page and 'value="default-agent"' in page
    assert "acme" not in page.lower()


def test_a_filter_on_another_projects_name_says_no_name_starts_with_it(operator, acme):
    page = runs_page(signed_in(operator), source="acme")
    assert "No source name starts with “acme”." in page


def test_a_member_sees_the_names_of_the_projects_he_may_see_and_of_the_chosen_one_only(
    operator, acme
):
    operator.groups.add(acme.groups.get())
    client = signed_in(operator)
    page = runs_page(client)
    assert 'value="acme_source"' in page and 'value="default_source"' in page
    session = client.session
    session[PROJECT_SESSION_KEY] = acme.pk
    session.save()
    page = runs_page(client)
    assert 'value="acme-agent"' in page and 'value="default-agent"' not in page
    assert "No source name starts with" not in runs_page(client, source="acme")
    assert "No source name starts with “default”." in runs_page(client, source="default")


def test_a_superuser_is_suggested_every_projects_names(acme):
    boss = User.objects.create_superuser("boss", password="boss-pass-123")
    page = runs_page(signed_in(boss))
    for name in ("acme_source", "default_source", "acme-agent", "default-agent"):
        assert f'value="{name}"' in page


def test_names_past_their_budget_are_the_latest_runs_and_claim_no_unmatched_name(
    postgres, operator, acme, monkeypatch
):
    """PostgreSQL cancels the skip scan at its budget: a scan made slow on purpose (the real
    cost is stepping over other projects' runs, docs/benchmarks.md)."""
    from django.db import connection

    def slow_scan(column: str, limit: int, projects: tuple[int, ...] | None = None) -> list:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(1)")
        return ["never"]

    monkeypatch.setattr(filters, "_skip_scan", slow_scan)
    make_run(agent="old-agent", source="old_source", created_at=ago(hours=3))
    names, complete = filters.names_within("source", (DEFAULT_PROJECT_ID,), fresh=True)
    assert not complete and "default_source" in names and "old_source" not in names
    assert "never" not in names and "acme_source" not in names
    page = runs_page(signed_in(operator), source="nowhere")
    assert "No source name starts with" not in page
