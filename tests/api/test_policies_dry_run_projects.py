"""A dry run replays one project's failures under that project's table: the API's, the token's
project's (its `ProjectPolicy` rows over the global ones); the dashboard's, the chosen project's
(every project's under the global table for "all")."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import ApiToken, Project, ProjectPolicy, RoutingPolicy, Run
from tests.dashboard.test_policies import form_of

HX = {"HTTP_HX_REQUEST": "true"}


def _fail(project: Project | None, failure_type: str, decision: str) -> Run:
    fields = {} if project is None else {"project": project}
    return Run.objects.create(
        agent="researcher",
        source="web_search",
        status=Run.Status.FAILED,
        failure_type=failure_type,
        decision=decision,
        **fields,
    )


@pytest.fixture
def acme(db) -> Project:
    """Acme aborts a rate limit at once (its own row); the global table retries it. The default
    project has 4 rate-limit failures; acme 2, and 3 timeouts."""
    acme = Project.objects.create(slug="acme", name="Acme")
    base = RoutingPolicy.objects.get(failure_type="rate_limited").snapshot()
    base.pop("failure_type")
    own = base | {"max_attempts": 1, "action_when_exhausted": "abort"}
    save_policy_change(ProjectPolicy(project=acme, failure_type="rate_limited", **own), None)
    for _ in range(4):
        _fail(None, "rate_limited", "retry")
    for _ in range(2):
        _fail(acme, "rate_limited", "abort")
    for _ in range(3):
        _fail(acme, "timeout", "retry")
    return acme


def dry_run_api(client: Client, secret: str, policies: list[dict]) -> dict:
    response = client.post(
        "/api/v1/policies/dry-run",
        {"days": 7, "policies": policies},
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {secret}",
    )
    assert response.status_code == 200, response.content
    return response.json()


def test_the_api_replays_the_tokens_projects_failures_under_its_table(client, acme):
    assert RoutingPolicy.objects.get(failure_type="rate_limited").max_attempts > 1
    _, default_secret = ApiToken.issue("default-agent")
    _, acme_secret = ApiToken.issue("acme-agent", project_id=acme.pk)

    default = dry_run_api(client, default_secret, [])
    assert default["failures"] == 4
    assert default["current"]["by_failure_type"] == {"rate_limited": {"retry": 4}}

    mine = dry_run_api(client, acme_secret, [])
    assert mine["failures"] == 5
    # Acme's rate limits are aborted by its own row, not retried as the global table would.
    assert mine["current"]["by_failure_type"]["rate_limited"] == {"abort": 2}
    assert mine["current"]["aborts"] == 2 and mine["current"]["retries"] == 3

    # A proposal goes over acme's own row: three attempts retry its two rate limits.
    proposal = [{"failure_type": "rate_limited", "max_attempts": 3}]
    changed = dry_run_api(client, acme_secret, proposal)
    assert changed["failures"] == 5
    assert changed["difference"]["aborts"] == -2 and changed["difference"]["retries"] == 2
    # The default project's replay is unchanged by acme's row and counts none of its failures.
    assert dry_run_api(client, default_secret, proposal)["failures"] == 4


def _editor(policy_editor) -> Client:
    client = Client()
    client.force_login(policy_editor)
    return client


def _dashboard_dry_run(client: Client, policy: RoutingPolicy, **changes) -> str:
    data = form_of(policy, over_budget_action=policy.over_budget_action, days="7", **changes)
    url = reverse("dashboard:policy_dry_run", args=[policy.pk])
    response = client.post(url, data, **HX)
    assert response.status_code == 200
    return response.content.decode()


def _switch(client: Client, project: Project | None) -> None:
    value = "" if project is None else project.pk
    client.post(reverse("dashboard:project_switch"), {"project": value, "next": "/policies/"})


def test_the_dashboard_replays_the_chosen_projects_failures(policy_editor, acme):
    client = _editor(policy_editor)
    rate = RoutingPolicy.objects.get(failure_type="rate_limited")
    timeout = RoutingPolicy.objects.get(failure_type="timeout")

    # All projects: every failure under the global table.
    every = _dashboard_dry_run(client, rate, max_attempts=1, action_when_exhausted="abort")
    assert "over 9 failures" in every

    _switch(client, acme)
    # Acme's failures only; acme overrides rate limits, so the global row's edit changes none.
    mine = _dashboard_dry_run(client, rate, max_attempts=1, action_when_exhausted="abort")
    assert "over 5 failures" in mine and "in Acme" in mine
    assert 'id="dry-run-why"' in mine and 'class="up"' not in mine
    # A row acme does not override reaches its runs: fewer timeout attempts, fewer retries.
    fewer = _dashboard_dry_run(client, timeout, max_attempts=1, action_when_exhausted="abort")
    assert "over 5 failures" in fewer and 'class="down"' in fewer

    _switch(client, Project.objects.get(slug="default"))
    default = _dashboard_dry_run(client, rate, max_attempts=1, action_when_exhausted="abort")
    assert "over 4 failures" in default and 'class="up"' in default
