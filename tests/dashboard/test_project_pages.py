"""The pages computed from every project's runs, for an operator who may see only some projects:
the SLOs, switch efficacy, retry audit and costs (and the overview's cost tiles) are counted from
that operator's projects' runs; the failure groups (a fold with no project) are refused, their
menu link, tile links and search section hidden. A superuser still sees every project's."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group, User
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from insights import groups
from insights.models import FailureGroup
from orchestrator.models import Project

from .conftest import make_failure, make_review, make_run, signed_in

# What only project alpha's runs hold: its agent, its sources, its failures' text, its spend.
# (The search page repeats the words searched for: its marks are what a hit would show.)
# Alpha's spend is 3 x 7,777.77 = 23,333.31 (every project's: 23,334.56).
ALPHA_MARKS = ("alphaagent", "alphasrc", "alphadst", "zebracorn exploded", "23,33", "23333", "7777")


@pytest.fixture
def world(db):
    cache.clear()
    alpha = Project.objects.create(slug="alphaproj", name="Alphaproj")
    beta = Project.objects.create(slug="betaproj", name="Betaproj")
    alpha_team = Group.objects.create(name="alpha team")
    beta_team = Group.objects.create(name="beta team")
    alpha.groups.add(alpha_team)
    beta.groups.add(beta_team)
    now = timezone.now()
    mine = {"project": alpha, "agent": "alphaagent", "source": "alphasrc"}
    for _ in range(3):
        make_failure(
            "server_fault",
            detail="zebracorn exploded",
            cost=Decimal("7777.77"),
            finished_at=now,
            **mine,
        )
    switched = make_failure("timeout", decision="switch_source", finished_at=now, **mine)
    make_run(
        project=alpha,
        agent="alphaagent",
        source="alphadst",
        switched_from=switched,
        finished_at=now + timedelta(seconds=3),
    )
    make_failure("server_fault", retryable=False, decision="retry", status_code=501, **mine)
    theirs = {"project": beta, "agent": "betaagent", "source": "betasrc"}
    beta_failure = make_failure("timeout", detail="beta broke", finished_at=now, **theirs)
    make_run(cost=Decimal("1.25"), **theirs)
    make_failure("server_fault", retryable=False, decision="retry", status_code=502, **theirs)
    groups.fold()
    beta_failure.refresh_from_db()
    review = make_review(beta_failure, project=beta, signature=beta_failure.signature)
    return {
        "review": review,
        "alpha": alpha,
        "beta": beta,
        "beta_team": beta_team,
        "beta_failure": beta_failure,
    }


@pytest.fixture
def beta_operator(operator, world) -> User:
    operator.groups.add(world["beta_team"])
    return operator


@pytest.fixture
def root(db) -> User:
    return User.objects.create_superuser("root", password="root-pass-123")


PAGES = [
    ("dashboard:overview", {}),
    ("dashboard:costs", {}),
    ("dashboard:costs", {"format": "csv"}),
    ("dashboard:slos", {}),
    ("dashboard:slos", {"format": "csv"}),
    ("dashboard:switch_efficacy", {}),
    ("dashboard:switch_efficacy", {"format": "csv"}),
    ("dashboard:retry_audit", {}),
    ("dashboard:retry_audit", {"format": "csv"}),
    ("dashboard:search", {"q": "zebracorn"}),
]


def body(response) -> str:
    if hasattr(response, "streaming_content"):
        return b"".join(response.streaming_content).decode().lower()
    return response.content.decode().lower()


def test_an_operator_of_some_projects_gets_nothing_of_the_others(beta_operator, world):
    client = signed_in(beta_operator)
    for name, query in PAGES:
        response = client.get(reverse(name), query)
        assert response.status_code == 200, (name, query)
        page = body(response)
        found = [mark for mark in ALPHA_MARKS if mark in page]
        assert not found, (name, query, found)
    # Their own projects' runs are counted on the same pages.
    assert "betaagent" in body(client.get(reverse("dashboard:slos")))
    assert "betasrc" in body(client.get(reverse("dashboard:retry_audit")))
    assert "betaagent" in body(client.get(reverse("dashboard:costs")))
    assert "1.25 usd" in body(client.get(reverse("dashboard:overview")))


def test_the_failure_groups_are_refused_and_hidden_to_them(beta_operator, world):
    client = signed_in(beta_operator)
    alpha_group = FailureGroup.objects.get(pattern__contains="zebracorn")
    beta_group = FailureGroup.objects.get(pattern__contains="beta broke")
    for url in (
        reverse("dashboard:failure_groups"),
        reverse("dashboard:failure_group", args=[alpha_group.pk]),
        reverse("dashboard:failure_group", args=[beta_group.pk]),
    ):
        response = client.get(url)
        assert response.status_code == 403, url
        page = body(response)
        assert "shown to operators who may see every project" in page
        assert "zebracorn" not in page
    overview = body(client.get(reverse("dashboard:overview")))
    assert 'href="/groups/' not in overview and "tile-groups" not in overview
    search = body(client.get(reverse("dashboard:search"), {"q": "beta broke"}))
    assert 'id="search-runs"' in search and 'id="search-groups"' not in search
    assert "/groups/" not in search
    named = client.get(reverse("dashboard:search"), {"q": f"group {alpha_group.pk}"})
    assert named.status_code == 200 and "/groups/" not in body(named)
    run_page = body(client.get(reverse("dashboard:run_detail", args=[world["beta_failure"].pk])))
    assert "failure group #" not in run_page
    item = body(client.get(reverse("dashboard:review_item", args=[world["review"].pk])))
    assert "beta broke" in item and "failure group #" not in item
    queue = body(client.get(reverse("dashboard:review_queue"), {"view": "groups"}))
    assert "failure group #" not in queue


def test_the_superuser_still_sees_every_project(root, world):
    client = signed_in(root)
    assert "23,334.56" in body(client.get(reverse("dashboard:overview")))
    assert "alphaagent" in body(client.get(reverse("dashboard:costs")))
    slos = body(client.get(reverse("dashboard:slos")))
    assert "alphaagent" in slos and "betaagent" in slos
    assert "alphadst" in body(client.get(reverse("dashboard:switch_efficacy")))
    assert "alphasrc" in body(client.get(reverse("dashboard:retry_audit")))
    listed = client.get(reverse("dashboard:failure_groups"))
    assert listed.status_code == 200 and "zebracorn" in body(listed)
    assert 'href="/groups/"' in body(client.get(reverse("dashboard:overview")))
    alpha_group = FailureGroup.objects.get(pattern__contains="zebracorn")
    detail = client.get(reverse("dashboard:failure_group", args=[alpha_group.pk]))
    assert detail.status_code == 200
    search = body(client.get(reverse("dashboard:search"), {"q": "zebracorn"}))
    assert 'id="search-groups"' in search and f"/groups/{alpha_group.pk}" in search
    run_page = body(client.get(reverse("dashboard:run_detail", args=[world["beta_failure"].pk])))
    assert "failure group #" in run_page
    item = body(client.get(reverse("dashboard:review_item", args=[world["review"].pk])))
    assert "failure group #" in item
    queue = body(client.get(reverse("dashboard:review_queue"), {"view": "groups"}))
    assert "failure group #" in queue
