"""The project switcher: every page shows the chosen project's runs, workflows and review items,
its tiles equal the lists they open, and a project its groups keep is nobody else's."""

from __future__ import annotations

import random
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from dashboard.access import PROJECT_SESSION_KEY
from dashboard.tiles import overview_tiles
from insights.stats import WINDOWS, refresh_rollups, window_stats
from orchestrator.models import Project, ReviewItem, Run

from .conftest import make_failure, make_review, make_run, make_workflow, signed_in
from .test_overview import NOW, edge_times, random_runs, raw_window, shown


@pytest.fixture
def acme(db) -> Project:
    return Project.objects.create(slug="acme", name="Acme")


def switch(client, project) -> None:
    value = "" if project is None else project.pk
    response = client.post(
        reverse("dashboard:project_switch"), {"project": value, "next": "/runs/"}
    )
    assert response.status_code == 302 and response["Location"] == "/runs/"


def listed(client, name: str, **query) -> str:
    return client.get(reverse(name), query).content.decode()


def test_the_switcher_narrows_every_list_to_the_chosen_project(operator, acme):
    ours = make_failure("timeout", detail="ours", project=acme)
    theirs = make_failure("timeout", detail="theirs")
    wf = make_workflow(name="acme research", project=acme)
    make_workflow(name="default research")
    make_review(make_failure("unclassified", project=acme), project=acme)
    make_review(make_failure("unclassified"))
    client = signed_in(operator)
    page = client.get(reverse("dashboard:overview")).content.decode()
    assert 'action="/projects/switch/"' in page and "All projects" in page and "Acme" in page

    switch(client, acme)
    assert client.session[PROJECT_SESSION_KEY] == acme.pk
    runs = listed(client, "dashboard:runs")
    assert f"/runs/{ours.pk}/" in runs and f"/runs/{theirs.pk}/" not in runs
    assert client.get(reverse("dashboard:run_detail", args=[theirs.pk])).status_code == 404
    workflows = listed(client, "dashboard:workflows")
    assert "acme research" in workflows and "default research" not in workflows
    queue = listed(client, "dashboard:review_queue")
    assert queue.count('id="nav-review-count">1<') == 1
    assert client.get(reverse("dashboard:workflow_detail", args=[wf.pk])).status_code == 200
    # The failure groups are not split by project: they say so while a project is chosen; the
    # SLOs and switch efficacy are counted from the chosen project's runs.
    assert "This page counts every project" in listed(client, "dashboard:failure_groups")
    for name in ("dashboard:slos", "dashboard:switch_efficacy", "dashboard:retry_audit"):
        assert "This page counts every project" not in listed(client, name), name
    assert "This page counts every project" not in listed(client, "dashboard:runs")

    switch(client, None)
    assert "This page counts every project" not in listed(client, "dashboard:failure_groups")
    runs = listed(client, "dashboard:runs")
    assert f"/runs/{ours.pk}/" in runs and f"/runs/{theirs.pk}/" in runs


def test_a_project_with_groups_is_seen_by_its_groups_only(operator, acme):
    team = Group.objects.create(name="acme team")
    acme.groups.add(team)
    hidden = make_run(project=acme, agent="acme-agent")
    client = signed_in(operator)
    assert "Acme" not in client.get(reverse("dashboard:overview")).content.decode()
    assert client.get(reverse("dashboard:run_detail", args=[hidden.pk])).status_code == 404
    assert "acme-agent" not in listed(client, "dashboard:runs")
    operator.groups.add(team)
    client = signed_in(operator)
    assert client.get(reverse("dashboard:run_detail", args=[hidden.pk])).status_code == 200


def test_the_tiles_of_a_project_equal_the_lists_they_open(operator, acme):
    for i in range(3):
        make_failure("timeout", project=acme, source=f"s{i}")
    make_failure("rate_limited", project=acme)
    make_run(project=acme)
    for _ in range(5):
        make_failure("timeout")
    make_review(make_failure("unclassified", project=acme), project=acme)
    make_review(make_failure("unclassified"))
    client = signed_in(operator)
    switch(client, acme)
    tiles = overview_tiles(WINDOWS["24h"], projects=(acme.pk,))
    for tile in tiles["traffic"] + tiles["failures"]:
        if not tile.href.startswith("/runs/") or tile.value in ("—",):
            continue
        if tile.key == "runs" or tile.failure_type:
            page = client.get(tile.href).content.decode()
            rows = set(re.findall(r'href="/runs/(\d+)/"', page))
            assert str(len(rows)) == tile.value.replace(",", ""), (tile.key, tile.failure_type)
    assert next(t for t in tiles["traffic"] if t.key == "runs").value == "6"
    review = next(t for t in tiles["attention"] if t.key == "review")
    assert review.value == "1"
    assert ReviewItem.objects.open().count() == 2


@pytest.mark.parametrize("name", ["24h", "7d", "1h"])
def test_a_projects_window_stats_equal_its_raw_runs_across_every_edge(db, acme, name):
    import time_machine

    with time_machine.travel(NOW, tick=False):
        window = WINDOWS[name]
        prev_start = window.bounds(NOW)[0]
        rng = random.Random(name)
        span = NOW - prev_start + timedelta(hours=12)
        times = [NOW - span * rng.random() for _ in range(200)] + edge_times(window, NOW)
        random_runs(rng, sorted(times))
        ids = list(Run.objects.values_list("pk", flat=True))
        Run.objects.filter(pk__in=rng.sample(ids, len(ids) // 2)).update(project=acme)
        refresh_rollups(NOW - timedelta(days=15))
        got = shown(window_stats(window, projects=(acme.pk,)))
        everyone = shown(window_stats(window))
        # The other project's runs leave the windows: the raw count is then of acme's alone.
        Run.objects.exclude(project=acme).update(created_at=NOW - timedelta(days=400))
        assert got == raw_window(window, NOW)
        assert got != everyone


def test_the_policies_page_shows_the_chosen_projects_own_routing(operator, acme):
    from orchestrator.coordination.policy_changes import save_policy_change
    from orchestrator.models import ProjectPolicy, RoutingPolicy

    base = RoutingPolicy.objects.get(failure_type="timeout").snapshot()
    base.pop("failure_type")
    row = ProjectPolicy(project=acme, failure_type="timeout", **(base | {"max_attempts": 1}))
    save_policy_change(row, None)
    other = Project.objects.create(slug="other", name="Other")
    client = signed_in(operator)
    page = listed(client, "dashboard:policies")
    assert "Projects&#x27; own routing" in page or "Projects' own routing" in page
    assert "<td>Acme</td>" in page
    client.post(reverse("dashboard:project_switch"), {"project": other.pk})
    assert "<td>Acme</td>" not in listed(client, "dashboard:policies")


def test_a_deployment_of_one_project_shows_no_switcher(operator):
    page = signed_in(operator).get(reverse("dashboard:overview")).content.decode()
    assert 'class="projects"' not in page
    assert "This page counts every project" not in listed(signed_in(operator), "dashboard:slos")
