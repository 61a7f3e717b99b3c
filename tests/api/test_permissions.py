"""The permission table: every endpoint of the API by the requesting token's scopes (none,
read:all, act:all, both) by whose work it is asked about (the token's own, another token's of
its project, another project's token's).

A token's own work is always its to read and act on; another token's is read with `read:all` and
acted on with `act:all`, and without them it is unknown: a 404 in the error envelope, as for an id
that does not exist (a report naming it is refused as naming an unknown one), never a 403. Lists
never hold another token's data without `read:all`. Policies, classification, OTLP and starting a
workflow are nobody's work: every token may. The endpoints are read from the OpenAPI document, so
an endpoint added without rows here fails `test_every_endpoint_has_rows`. Another project's work
is unknown whatever the scopes: read:all and act:all never cross projects.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from orchestrator.coordination.actions import do_resolve_review
from orchestrator.models import ApiToken, Project, ReviewItem, Run, Workflow
from orchestrator.models.tokens import ACT_ALL, READ_ALL
from orchestrator.vocabulary import Channel
from tests.api.helpers import assert_envelope, failed_run, ok_run, post_json

API = "/api/v1"
SCOPES = {"none": [], "read:all": [READ_ALL], "act:all": [ACT_ALL], "both": [READ_ALL, ACT_ALL]}
OWNERS = ["own", "other", "other project"]


@dataclass
class Work:
    """One token's work: what a case reads or acts on."""

    token: ApiToken
    failed: Run  # failed, no decision yet
    running: Run  # reported running, to finish
    workflow: Workflow  # external, no run in flight
    resolved: ReviewItem  # resolved, not picked up


def work_of(token: ApiToken, operator: Any) -> Work:
    project = token.project_id

    def run(**fields: Any) -> Run:
        defaults = {"token": token, "agent": token.name, "source": "web_search"}
        return Run.objects.create(project_id=project, **(defaults | fields))

    failure = {"status": Run.Status.FAILED, "failure_type": "timeout", "retryable": True}
    workflow = Workflow.objects.create(
        name=f"{token.name}'s",
        coordinator="external",
        topics=["film"],
        token=token,
        project_id=project,
    )
    escalated = run(**failure)
    item = ReviewItem.objects.create(
        run=escalated, reason=f"{token.name} needs a human", project_id=project
    )
    assert do_resolve_review(item, operator, "abort", channel=Channel.DASHBOARD, note="stop")
    now = timezone.now()
    return Work(
        token=token,
        failed=run(**failure, topic="film"),
        running=run(status=Run.Status.RUNNING, started_at=now),
        workflow=workflow,
        resolved=ReviewItem.objects.get(pk=item.pk),
    )


@dataclass
class World:
    me: ApiToken
    headers: dict[str, str]
    mine: Work
    theirs: Work
    elsewhere: Work  # another project's token's, granted every scope

    def target(self, owner: str) -> Work:
        return {"own": self.mine, "other": self.theirs, "other project": self.elsewhere}[owner]


@pytest.fixture
def world(db, operator) -> World:
    me, secret = ApiToken.issue("agent-a")
    them, _ = ApiToken.issue("agent-b")
    acme = Project.objects.create(slug="acme", name="Acme")
    afar, _ = ApiToken.issue("agent-c", scopes=[READ_ALL, ACT_ALL], project_id=acme.pk)
    return World(
        me=me,
        headers={"HTTP_AUTHORIZATION": f"Bearer {secret}"},
        mine=work_of(me, operator),
        theirs=work_of(them, operator),
        elsewhere=work_of(afar, operator),
    )


# ---------------------------------------------------------------------------------------------
# The table. A row: the endpoint (as the OpenAPI document names it), a name, the scope another
# token's work needs (None: not per-token data, any token may), the request, and what answers
# when allowed and when not.

Call = Callable[[Client, World, Work], Any]


@dataclass
class Row:
    endpoint: tuple[str, str]
    name: str
    needs: str | None
    call: Call
    allowed: int
    refused: int = 404
    # Called with the answer and whether the token may: for a list, whether it reads all.
    check: Callable[[Any, World, Work, bool], None] | None = None
    lists: bool = False

    @property
    def id(self) -> str:
        return f"{self.endpoint[0]} {self.endpoint[1]} {self.name}"


def get(path: str, **params: Any) -> Call:
    return lambda client, w, t: client.get(API + path.format(t=t), params, **w.headers)


def post(path: str, body: Callable[[Work], Any]) -> Call:
    return lambda client, w, t: post_json(client, path.format(t=t), body(t), **w.headers)


def patch(path: str, body: Any) -> Call:
    return lambda client, w, t: client.patch(
        API + path.format(t=t), json.dumps(body), content_type="application/json", **w.headers
    )


def listed_ids(response: Any) -> set[int]:
    if response.streaming:
        lines = b"".join(response.streaming_content).decode().splitlines()
        return {json.loads(line)["id"] for line in lines if line.strip()}
    return {item["id"] for item in response.json()["items"]}


def runs_listed(response: Any, w: World, t: Work, reads_all: bool) -> None:
    ids = listed_ids(response)
    mine = set(Run.objects.filter(token=w.me).values_list("pk", flat=True))
    theirs = set(Run.objects.filter(token=w.theirs.token).values_list("pk", flat=True))
    assert mine <= ids  # one's own work is always listed
    assert (ids & theirs == theirs) if reads_all else not (ids & theirs), (reads_all, ids)


def items_listed(response: Any, w: World, t: Work, reads_all: bool) -> None:
    ids = listed_ids(response)
    assert w.mine.resolved.pk in ids
    assert (w.theirs.resolved.pk in ids) is reads_all
    # Nothing of the other token's without read:all, not even its reason's words.
    assert ("agent-b" in response.content.decode()) is reads_all


def own_feed(response: Any, w: World, t: Work, reads_all: bool) -> None:
    """The feed of resolutions to pick up is the token's own, whatever it may read."""
    items_listed(response, w, t, reads_all=False)


def batch_outcome(response: Any, w: World, t: Work, allowed: bool) -> None:
    (result,) = response.json()["results"]
    assert result["status"] == ("created" if allowed else "rejected"), result
    if not allowed:
        assert "no workflow with id" in json.dumps(result["error"])


def not_acted(response: Any, w: World, t: Work, allowed: bool) -> None:
    """A refused action changed nothing of the other token's."""
    if allowed:
        return
    t.failed.refresh_from_db()
    t.running.refresh_from_db()
    t.resolved.refresh_from_db()
    assert t.failed.decision == "" and t.failed.status == Run.Status.FAILED
    assert t.running.status == Run.Status.RUNNING
    assert t.resolved.delivered_at is None
    assert not ReviewItem.objects.filter(run=t.failed).exists()
    assert not Run.objects.filter(retry_of=t.failed).exists()
    assert not Run.objects.filter(workflow=t.workflow).exists()


SPAN = {
    "resourceSpans": [
        {
            "scopeSpans": [
                {
                    "spans": [
                        {
                            "traceId": "0af7651916cd43dd8448eb211c80319c",
                            "spanId": "b7ad6b7169203331",
                            "name": "execute_tool web_search",
                            "kind": 3,
                            "startTimeUnixNano": "1700000000000000000",
                            "endTimeUnixNano": "1700000001000000000",
                            "attributes": [
                                {
                                    "key": "gen_ai.operation.name",
                                    "value": {"stringValue": "execute_tool"},
                                }
                            ],
                            "status": {"code": 1},
                        }
                    ]
                }
            ]
        }
    ]
}

ROWS = [
    # runs
    Row(("post", "/runs"), "plain", None, post("/runs", lambda t: ok_run()), 201),
    Row(
        ("post", "/runs"),
        "into a workflow",
        ACT_ALL,
        post("/runs", lambda t: ok_run(workflow=t.workflow.pk, topic="film")),
        201,
        422,
        not_acted,
    ),
    Row(
        ("post", "/runs"),
        "retry of a run",
        ACT_ALL,
        post("/runs", lambda t: failed_run(retry_of=t.failed.pk, attempt=2)),
        201,
        422,
        not_acted,
    ),
    Row(
        ("post", "/runs/batch"),
        "plain",
        None,
        post("/runs/batch", lambda t: {"runs": [ok_run()]}),
        200,
    ),
    Row(
        ("post", "/runs/batch"),
        "into a workflow",
        ACT_ALL,
        post("/runs/batch", lambda t: {"runs": [ok_run(workflow=t.workflow.pk, topic="film")]}),
        200,
        200,
        batch_outcome,
    ),
    Row(("get", "/runs"), "list", READ_ALL, get("/runs"), 200, 200, runs_listed, lists=True),
    Row(
        ("get", "/runs/export"),
        "export",
        READ_ALL,
        get("/runs/export", format="jsonl"),
        200,
        200,
        runs_listed,
        lists=True,
    ),
    Row(("get", "/runs/{run_id}"), "read", READ_ALL, get("/runs/{t.failed.pk}"), 200),
    Row(
        ("patch", "/runs/{run_id}"),
        "finish",
        ACT_ALL,
        patch("/runs/{t.running.pk}", {"status": "ok", "results": []}),
        200,
        404,
        not_acted,
    ),
    # coordination
    Row(
        ("post", "/decisions"),
        "on a run",
        ACT_ALL,
        post("/decisions", lambda t: {"run": t.failed.pk}),
        200,
        404,
        not_acted,
    ),
    Row(
        ("post", "/decisions"),
        "with a workflow",
        READ_ALL,
        post(
            "/decisions",
            lambda t: {
                "failure": {"failure_type": "timeout"},
                "source": "web_search",
                "workflow": t.workflow.pk,
                "topic": "film",
            },
        ),
        200,
    ),
    Row(
        ("post", "/decisions"),
        "a described failure",
        None,
        post("/decisions", lambda t: {"failure": {"failure_type": "timeout"}, "source": "s"}),
        200,
    ),
    Row(("post", "/classify"), "any", None, post("/classify", lambda t: {"status_code": 429}), 200),
    # reviews
    Row(
        ("post", "/reviews"),
        "escalate",
        ACT_ALL,
        post("/reviews", lambda t: {"run": t.failed.pk, "reason": "from another agent"}),
        201,
        404,
        not_acted,
    ),
    Row(("get", "/reviews/{item_id}"), "read", READ_ALL, get("/reviews/{t.resolved.pk}"), 200),
    Row(
        ("get", "/reviews/{item_id}"),
        "long poll",
        READ_ALL,
        get("/reviews/{t.resolved.pk}", wait="1"),
        200,
    ),
    Row(
        ("get", "/reviews"),
        "every token's",
        READ_ALL,
        get("/reviews", all_tokens="true"),
        200,
        200,
        items_listed,
        lists=True,
    ),
    Row(
        ("get", "/reviews"),
        "own feed",
        READ_ALL,
        get("/reviews", state="resolved", delivered="false"),
        200,
        200,
        own_feed,
        lists=True,
    ),
    Row(
        ("post", "/reviews/{item_id}/ack"),
        "ack",
        ACT_ALL,
        post("/reviews/{t.resolved.pk}/ack", lambda t: {}),
        200,
        404,
        not_acted,
    ),
    # workflows
    Row(
        ("post", "/workflows"),
        "start",
        None,
        post("/workflows", lambda t: {"name": "w", "topics": ["t"], "coordinator": "external"}),
        201,
    ),
    Row(
        ("get", "/workflows/{workflow_id}"),
        "read",
        READ_ALL,
        get("/workflows/{t.workflow.pk}"),
        200,
    ),
    Row(
        ("get", "/workflows/{workflow_id}/coverage"),
        "coverage",
        READ_ALL,
        get("/workflows/{t.workflow.pk}/coverage"),
        200,
    ),
    Row(
        ("post", "/workflows/{workflow_id}/finish"),
        "finish",
        ACT_ALL,
        post("/workflows/{t.workflow.pk}/finish", lambda t: {}),
        200,
    ),
    # policies and OpenTelemetry: nobody's work
    Row(("get", "/policies"), "read", None, get("/policies"), 200),
    Row(("get", "/policies/versions"), "read", None, get("/policies/versions"), 200),
    Row(
        ("post", "/policies/dry-run"),
        "dry run",
        None,
        post("/policies/dry-run", lambda t: {"policies": [], "days": 1}),
        200,
    ),
    Row(
        ("post", "/otlp/v1/traces"),
        "export",
        None,
        post("/otlp/v1/traces", lambda t: SPAN),
        200,
    ),
]


def allowed(row: Row, scopes: list[str], owner: str) -> bool:
    if row.lists or row.needs is None or owner == "own":
        return True
    if owner == "other project":
        return False  # whatever the scopes
    return row.needs in scopes


def cases() -> list[Any]:
    """Every row by every scope set, by both owners where whose work it is matters."""
    return [
        pytest.param(row, scopes, owner, id=f"{row.id}-{scopes}-{owner}")
        for row in ROWS
        for scopes in SCOPES
        for owner in (OWNERS if row.needs or row.lists else ["own"])
    ]


@pytest.mark.parametrize(("row", "scopes", "owner"), cases())
def test_the_permission_table(client, world, row, scopes, owner):
    world.me.set_scopes(SCOPES[scopes])
    target = world.target(owner)
    may = allowed(row, SCOPES[scopes], owner)
    response = row.call(client, world, target)
    expected = row.allowed if may else row.refused
    body = b"" if response.streaming else response.content
    assert response.status_code == expected, (row.id, scopes, owner, body[:500])
    if expected == 404:
        body = assert_envelope(response, 404, "resource_missing")
        assert "agent-b" not in json.dumps(body) and "agent-c" not in json.dumps(body)
    if expected == 422:
        assert "no workflow with id" in body.decode() or "no run with id" in body.decode()
    if row.check is not None:
        row.check(response, world, target, READ_ALL in SCOPES[scopes] if row.lists else may)
    if row.lists:  # never a word of another project's work, whatever the scopes
        model = ReviewItem if row.endpoint[1].startswith("/reviews") else Run
        afar = model.objects.filter(project_id=world.elsewhere.token.project_id)
        assert afar.exists()
        assert not listed_ids(row.call(client, world, target)) & set(
            afar.values_list("pk", flat=True)
        )
        assert "agent-c" not in body.decode()


def test_every_endpoint_has_rows():
    from orchestrator.api import api

    schema = api.get_openapi_schema(path_prefix="/")
    endpoints = {(method, path) for path, ops in schema["paths"].items() for method in ops}
    assert endpoints == {row.endpoint for row in ROWS}


def test_a_refusal_reads_as_an_unknown_id(client, world):
    """Another token's run and a run that never existed answer alike, word for word but the id."""
    theirs = client.get(f"{API}/runs/{world.theirs.failed.pk}", **world.headers).json()
    unknown = client.get(f"{API}/runs/999999", **world.headers).json()
    strip = lambda body, pk: json.dumps(body).replace(str(pk), "N")  # noqa: E731
    assert strip(theirs, world.theirs.failed.pk) == strip(unknown, 999999)
