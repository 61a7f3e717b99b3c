"""Scopes are granted explicitly and audited: createtoken --scope, the admin's checkboxes (in the
audit trail and Django's admin log), only known names; a grant counts at once in the process that
made it; the MCP tools, which call the API's operations, answer another token's work as the API
does. The endpoint table is test_permissions.py."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from orchestrator.client.mcp_tools import ToolFailure
from orchestrator.coordination.actions import do_resolve_review
from orchestrator.mcp.services import Caller, InProcess
from orchestrator.models import ApiToken, AuditEntry, ReviewItem, Run
from orchestrator.vocabulary import Channel
from tests.api.test_mcp import serving


def test_createtoken_grants_the_scopes_it_is_given_and_none_by_default(db):
    out = io.StringIO()
    call_command("createtoken", "plain-agent", stdout=out)
    plain = ApiToken.objects.authenticate(out.getvalue().strip())
    assert plain.scopes == []
    out = io.StringIO()
    call_command(
        "createtoken", "coordinator", "--scope", "act:all", "--scope", "read:all", stdout=out
    )
    token = ApiToken.objects.authenticate(out.getvalue().strip())
    assert token.scopes == ["read:all", "act:all"]
    entry = AuditEntry.objects.get(action="apitoken.create", object_id=str(token.pk))
    assert entry.after["scopes"] == ["read:all", "act:all"]


def test_createtoken_refuses_an_unknown_scope(db):
    with pytest.raises(CommandError, match="write:all"):
        call_command("createtoken", "x", "--scope", "write:all", stdout=io.StringIO())
    assert not ApiToken.objects.exists()


def test_only_known_scopes_are_stored(db):
    token, _ = ApiToken.issue("agent")
    token.scopes = ["read:all", "admin"]
    with pytest.raises(ValidationError, match="admin"):
        token.full_clean()
    with pytest.raises(ValidationError):
        token.set_scopes(["everything"])
    with pytest.raises(ValidationError):
        ApiToken.issue("other", scopes=["read:everything"])


def test_a_grant_in_the_admin_is_audited_and_in_the_admin_log(admin_client, admin_user):
    token, _ = ApiToken.issue("crm-agent")
    url = reverse("admin:orchestrator_apitoken_change", args=[token.pk])
    page = admin_client.get(url).content.decode()
    assert 'value="read:all"' in page and 'value="act:all"' in page
    response = admin_client.post(url, {"name": "crm-agent", "scopes": ["read:all"]})
    assert response.status_code == 302, response.content
    token.refresh_from_db()
    assert token.scopes == ["read:all"]
    entry = AuditEntry.objects.get(action="apitoken.scopes", object_id=str(token.pk))
    assert (entry.before, entry.after) == ({"scopes": []}, {"scopes": ["read:all"]})
    assert entry.actor == admin_user and entry.note == "admin"
    logged = LogEntry.objects.get(object_id=str(token.pk))
    assert logged.get_change_message() == "Changed scopes."
    # An unrelated edit grants nothing and audits nothing new.
    admin_client.post(url, {"name": "crm agent", "scopes": ["read:all"]})
    assert AuditEntry.objects.filter(action="apitoken.scopes").count() == 1
    admin_client.post(url, {"name": "crm agent"})  # every box unticked: back to its own work
    token.refresh_from_db()
    assert token.scopes == []
    assert AuditEntry.objects.filter(action="apitoken.scopes").count() == 2


def test_a_token_made_in_the_admin_with_scopes_has_them_from_the_start(admin_client):
    url = reverse("admin:orchestrator_apitoken_add")
    admin_client.post(url, {"name": "nightly", "scopes": ["act:all", "read:all"]})
    token = ApiToken.objects.get(name="nightly")
    assert token.scopes == ["read:all", "act:all"]
    entry = AuditEntry.objects.get(action="apitoken.create", object_id=str(token.pk))
    assert entry.after["scopes"] == ["read:all", "act:all"]


@override_settings(API_TOKEN_CACHE_SECONDS=60)
def test_a_grant_counts_at_once_though_the_token_was_remembered(client, db):
    them, _ = ApiToken.issue("agent-b")
    run = Run.objects.create(token=them, agent="b", source="s", status=Run.Status.SUCCEEDED)
    token, secret = ApiToken.issue("coordinator")
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    assert client.get(f"/api/v1/runs/{run.pk}", **headers).status_code == 404  # remembered
    token.set_scopes(["read:all"])
    assert client.get(f"/api/v1/runs/{run.pk}", **headers).status_code == 200
    token.set_scopes([])
    assert client.get(f"/api/v1/runs/{run.pk}", **headers).status_code == 404


def tools(token: ApiToken) -> InProcess:
    return InProcess(Caller(token, lambda path: f"http://127.0.0.1{path}", {}))


def refused(call: Any) -> dict[str, Any]:
    with pytest.raises(ToolFailure) as failure:
        call()
    return failure.value.envelope


@serving
@override_settings(ALLOWED_HOSTS=["127.0.0.1"], API_RATE_LIMIT_PER_MINUTE=0)
def test_mcp_tools_answer_another_tokens_work_as_the_api_does():
    from django.contrib.auth.models import User

    operator = User.objects.create_user("olga-mcp")
    them, _ = ApiToken.issue("agent-b")
    failed = {"status": Run.Status.FAILED, "failure_type": "timeout", "retryable": True}
    theirs = Run.objects.create(token=them, agent="b", source="s", **failed)
    running = Run.objects.create(
        token=them, agent="b", source="s", status=Run.Status.RUNNING, started_at=timezone.now()
    )
    escalated = Run.objects.create(token=them, agent="b", source="s", **failed)
    item = ReviewItem.objects.create(run=escalated, reason="agent-b's reason")
    do_resolve_review(item, operator, "abort", channel=Channel.DASHBOARD, note="stop")

    me, _ = ApiToken.issue("agent-a")
    mine = tools(me)
    for call in (
        lambda: mine.decide({"run": theirs.pk}),
        lambda: mine.escalate(theirs.pk, "mine now"),
        lambda: mine.finish(running.pk, {"status": "ok", "results": []}),
        lambda: mine.wait(item.pk, 0),
        lambda: mine.ack(item.pk),
    ):
        envelope = refused(call)
        assert envelope["failure_type"] == "resource_missing", envelope
        assert "agent-b" not in str(envelope)
    assert mine.resolutions(50)["items"] == []
    report = refused(
        lambda: mine.report(
            {"status": "error", "failure_type": "timeout"},
            "a",
            "s",
            {"retry_of": theirs.pk, "attempt": 2},
            "",
        )
    )
    assert "no run with id" in str(report["errors"])
    theirs.refresh_from_db()
    assert theirs.decision == "" and not ReviewItem.objects.filter(run=theirs).exists()

    reader = tools(ApiToken.issue("reader", scopes=["read:all"])[0])
    assert reader.wait(item.pk, 0)["id"] == item.pk
    assert refused(lambda: reader.decide({"run": theirs.pk}))["failure_type"] == (
        "resource_missing"
    )
    actor = tools(ApiToken.issue("actor", scopes=["act:all"])[0])
    assert actor.decide({"run": theirs.pk})["run"] == theirs.pk
    assert actor.ack(item.pk)["delivered_at"] is not None
    assert actor.finish(running.pk, {"status": "ok", "results": []})["status"] == "succeeded"


def batch_queries(client, headers: dict[str, str], runs: list[dict[str, Any]]) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.api.helpers import post_json

    with CaptureQueriesContext(connection) as queries:
        response = post_json(client, "/runs/batch", {"runs": runs}, **headers)
    results = response.json()["results"]
    assert {r["status"] for r in results} == {"created"}, results
    return len(queries)


def test_checking_a_batchs_references_costs_the_same_for_few_or_many(client, db, frozen_memos):
    """Whose workflow or run a report names is read in one query per kind, whatever the batch.
    (The memos are frozen: on a loaded machine one re-read once made 13 queries 14.)"""
    from tests.api.helpers import failed_run

    _, secret = ApiToken.issue("coordinator", scopes=["act:all"])
    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    them, _ = ApiToken.issue("agent-b")
    from orchestrator.models import Workflow

    firsts = [Run.objects.create(token=them, agent="b", source="s", **FAILED).pk for _ in range(30)]
    workflows = [Workflow.objects.create(name=f"w{i}", token=them).pk for i in range(30)]

    def batch(n: int, tag: str) -> list[dict[str, Any]]:
        return [
            failed_run(retry_of=firsts[i], attempt=2 if tag == "a" else 3, workflow=workflows[i])
            | {"idempotency_key": f"{tag}-{i}"}
            for i in range(n)
        ]

    batch_queries(client, headers, batch(1, "warm"))  # the token and its project remembered
    few = batch_queries(client, headers, batch(2, "a")[1:])
    many = batch_queries(client, headers, batch(30, "b")[1:])
    assert many == few


FAILED = {"status": Run.Status.FAILED, "failure_type": "timeout", "retryable": True}
