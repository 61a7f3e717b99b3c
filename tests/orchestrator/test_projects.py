"""Projects: the default project, what belongs to which, and a project's own routing policy."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command

from orchestrator.coordination import policy, workflow
from orchestrator.coordination.actions import do_restore_policy_version
from orchestrator.coordination.policy_changes import (
    delete_policy_object,
    save_policy_change,
)
from orchestrator.models import (
    DEFAULT_PROJECT_ID,
    ApiToken,
    AuditEntry,
    PolicyState,
    PolicyVersion,
    Project,
    ProjectPolicy,
    ReviewItem,
    RoutingPolicy,
    Run,
)
from orchestrator.vocabulary import Channel
from tests.api.helpers import failed_run, post_json


@pytest.fixture
def acme(db) -> Project:
    return Project.objects.create(slug="acme", name="Acme")


def bearer(secret: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def test_the_migration_made_the_default_project_and_everything_belongs_to_it(db):
    default = Project.objects.get(pk=DEFAULT_PROJECT_ID)
    assert default.slug == "default" and default.is_default
    token, _ = ApiToken.issue("agent")
    run = Run.objects.create(agent="a", source="s")
    wf = workflow.start_workflow("research", ["x"], "search")
    assert (token.project_id, run.project_id, wf.project_id) == (DEFAULT_PROJECT_ID,) * 3
    # The key sequence moved past the default project's fixed key.
    assert Project.objects.create(slug="next", name="Next").pk != DEFAULT_PROJECT_ID


def test_a_run_reported_by_a_token_belongs_to_the_tokens_project(client, acme):
    _, secret = ApiToken.issue("acme-agent", project_id=acme.pk)
    one = post_json(client, "/runs", failed_run(), **bearer(secret))
    assert one.status_code == 201, one.content
    batch = post_json(
        client, "/runs/batch", {"runs": [failed_run(), failed_run()]}, **bearer(secret)
    )
    assert batch.status_code == 200, batch.content
    ids = [one.json()["id"], *(item["id"] for item in batch.json()["results"])]
    assert set(Run.objects.filter(pk__in=ids).values_list("project_id", flat=True)) == {acme.pk}


def test_a_workflow_its_runs_and_review_items_take_the_tokens_project(acme):
    token, _ = ApiToken.issue("acme-coordinator", project_id=acme.pk)
    wf = workflow.start_workflow("research", ["film"], "search", token=token)
    assert wf.project_id == acme.pk
    workflow.first_attempt(wf, "film", "web_search")
    run = Run.objects.get(workflow=wf)
    assert run.project_id == acme.pk
    run.status, run.failure_type = Run.Status.FAILED, "unclassified"
    run.save()
    item = workflow.escalate(run, "a human should look")
    assert isinstance(item, ReviewItem) and item.project_id == acme.pk


def test_createtoken_puts_the_token_in_the_named_project(acme, capsys):
    call_command("createtoken", "acme-bot", "--project", "acme")
    secret = capsys.readouterr().out.split()[0]
    assert ApiToken.objects.authenticate(secret).project_id == acme.pk
    with pytest.raises(Exception, match="no-such"):
        call_command("createtoken", "lost-bot", "--project", "no-such")


def test_projects_are_seen_by_their_groups_and_open_ones_by_every_operator(acme, operator):
    team = Group.objects.create(name="acme team")
    secret = Project.objects.create(slug="secret", name="Secret")
    secret.groups.add(team)
    assert set(Project.objects.visible_to(operator)) == {Project.default(), acme}
    operator.groups.add(team)
    operator = User.objects.get(pk=operator.pk)
    assert set(Project.objects.visible_to(operator)) == {Project.default(), acme, secret}
    root = User.objects.create_superuser("root", password="x")
    assert Project.objects.visible_to(root).count() == 3


def _override(project: Project, **fields) -> ProjectPolicy:
    base = RoutingPolicy.objects.get(failure_type="rate_limited").snapshot()
    base.pop("failure_type")
    return ProjectPolicy(project=project, failure_type="rate_limited", **(base | fields))


def test_the_same_failure_in_two_projects_gets_each_projects_action(client, acme):
    _, default_secret = ApiToken.issue("default-agent")
    _, acme_secret = ApiToken.issue("acme-agent", project_id=acme.pk)
    override = _override(acme, max_attempts=1, action_when_exhausted="abort")
    version = save_policy_change(override, None, note="acme never retries a rate limit")
    failure = {"status": "error", "failure_type": "rate_limited", "retry_after": 1.0}
    body = {"failure": failure, "attempt": 1, "source": "news_api"}
    default = post_json(client, "/decisions", body, **bearer(default_secret)).json()
    acme_answer = post_json(client, "/decisions", body, **bearer(acme_secret)).json()
    assert default["action"] == "retry"
    assert acme_answer["action"] == "abort"
    assert default["policy_version"] == acme_answer["policy_version"] == version


def test_a_projects_policy_is_versioned_audited_and_restored(acme):
    first = PolicyState.current_version()
    version = save_policy_change(_override(acme, max_attempts=1), None, note="acme: once")
    assert version == first + 1
    kept = PolicyVersion.objects.get(version=version)
    assert [(row["project"], row["failure_type"]) for row in kept.project_policies] == [
        ("acme", "rate_limited")
    ]
    assert AuditEntry.objects.filter(action="projectpolicy.create").count() == 1
    older = PolicyVersion.objects.filter(version=first).first()
    if older is not None:
        changes = [change["what"] for change in kept.changes_since(older)]
        assert "project acme rate_limited" in changes
    assert policy.current_snapshot(acme.pk).rule("rate_limited").max_attempts == 1
    assert policy.current_snapshot().rule("rate_limited").max_attempts > 1
    assert policy.current_snapshot(DEFAULT_PROJECT_ID).rule("rate_limited").max_attempts > 1
    delete_policy_object(ProjectPolicy.objects.get(), None, note="gone")
    assert policy.current_snapshot(acme.pk).rule("rate_limited").max_attempts > 1
    do_restore_policy_version(version, None, channel=Channel.DASHBOARD)
    assert ProjectPolicy.objects.get().max_attempts == 1
    assert policy.current_snapshot(acme.pk).rule("rate_limited").max_attempts == 1


def test_a_token_reads_its_projects_policy(client, acme):
    _, default_secret = ApiToken.issue("default-agent")
    _, acme_secret = ApiToken.issue("acme-agent", project_id=acme.pk)
    save_policy_change(_override(acme, max_attempts=1, action_when_exhausted="abort"), None)

    def rate_limited(secret: str) -> dict:
        response = client.get("/api/v1/policies", **bearer(secret))
        assert response.status_code == 200
        return next(p for p in response.json()["policies"] if p["failure_type"] == "rate_limited")

    assert rate_limited(acme_secret)["max_attempts"] == 1
    assert rate_limited(default_secret)["max_attempts"] > 1
