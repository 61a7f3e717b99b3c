"""Agents' own coordinators close the loop over the API: a run reported running and finished by
PATCH, a decision recorded on it once, an escalation, the resolution read, listed and
acknowledged, and workflows an agent coordinates. (The live loop, with a worker, a browser and
webhooks, is in test_agent_loop_live.py.)"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.test import Client
from django.utils import timezone

from orchestrator.coordination import dispatch
from orchestrator.coordination.actions import do_resolve_review
from orchestrator.models import (
    ApiToken,
    OutboxMessage,
    ReviewItem,
    Run,
    SourceHealth,
    Workflow,
)
from orchestrator.vocabulary import Channel
from tests.api.helpers import assert_envelope, failed_run, post_json

API = "/api/v1"


def running(**fields: Any) -> dict[str, Any]:
    return {
        "status": "running",
        "agent": "researcher",
        "source": "crm_api",
        "attempted": {"operation": "lookup", "query": "ACME"},
        **fields,
    }


def auth_error(**fields: Any) -> dict[str, Any]:
    # Another vocabulary's names: the alias and camelCase read as everywhere else.
    return {
        "status": "error",
        "failureType": "auth_error",
        "statusCode": 401,
        "detail": "401 Unauthorized: token expired",
        "partialResults": [{"row": 1}],
        **fields,
    }


def patch(client: Client, path: str, body: Any, headers: dict[str, str]) -> Any:
    return client.patch(API + path, json.dumps(body), content_type="application/json", **headers)


def started(client: Client, headers: dict[str, str], **fields: Any) -> int:
    response = post_json(client, "/runs", running(**fields), **headers)
    assert response.status_code == 201, response.content
    return response.json()["id"]


def failed(client: Client, headers: dict[str, str], **fields: Any) -> int:
    run_id = started(client, headers, **fields)
    assert patch(client, f"/runs/{run_id}", auth_error(), headers).status_code == 200
    return run_id


def decide(client: Client, headers: dict[str, str], run_id: int) -> Any:
    return post_json(client, "/decisions", {"run": run_id}, **headers)


# ---------------------------------------------------------------------------------------------
# The run lifecycle


def test_a_running_run_is_in_flight_until_its_finish(client, auth_headers):
    run_id = started(client, auth_headers)
    run = Run.objects.get(pk=run_id)
    assert run.status == Run.Status.RUNNING and Run.objects.in_flight().filter(pk=run_id).exists()
    response = patch(client, f"/runs/{run_id}", auth_error(), auth_headers)
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["failure_type"]) == ("failed", "auth_failure")
    assert body["reported_failure_type"] == "auth_error" and body["status_code"] == 401
    assert body["partial_results"] == [{"row": 1}] and body["duration_ms"] >= 0
    assert not Run.objects.in_flight().filter(pk=run_id).exists()
    assert Run.objects.get(pk=run_id).signature  # a failure group key, as every failure has


def test_a_running_report_carries_no_outcome(client, auth_headers):
    response = post_json(client, "/runs", running(failure_type="timeout"), **auth_headers)
    body = assert_envelope(response, 422, "invalid_input")
    assert [e["path"] for e in body["errors"]] == ["failure_type"]


def test_the_same_finish_again_returns_the_run_and_another_is_a_409(client, auth_headers):
    run_id = started(client, auth_headers)
    first = patch(client, f"/runs/{run_id}", auth_error(), auth_headers)
    again = patch(client, f"/runs/{run_id}", auth_error(), auth_headers)
    assert again.status_code == 200 and again.json() == first.json()
    at = (timezone.now() + timedelta(hours=1)).isoformat()
    later = auth_error(finished_at=at)  # a retry saying another time
    assert patch(client, f"/runs/{run_id}", later, auth_headers).json() == first.json()
    other = patch(client, f"/runs/{run_id}", {"status": "ok", "results": [1]}, auth_headers)
    body = assert_envelope(other, 409, "invalid_input")
    assert "another outcome" in body["detail"]
    assert Run.objects.get(pk=run_id).status == Run.Status.FAILED


def test_a_finish_is_validated_like_a_report(client, auth_headers):
    run_id = started(client, auth_headers)
    missing = patch(client, f"/runs/{run_id}", {"status": "error"}, auth_headers)
    assert assert_envelope(missing, 422, "invalid_input")["errors"][0]["path"] == "failure_type"
    unknown = patch(client, f"/runs/{run_id}", {"status": "ok", "colour": 1}, auth_headers)
    assert_envelope(unknown, 422, "invalid_input")
    assert_envelope(
        patch(client, "/runs/999999", auth_error(), auth_headers), 404, "resource_missing"
    )


def test_the_coordinators_own_runs_are_not_finished_by_an_agent(client, auth_headers, api_token):
    run = Run.objects.create(agent="a", source="s", status=Run.Status.RUNNING)
    response = patch(client, f"/runs/{run.pk}", {"status": "ok"}, auth_headers)
    assert_envelope(response, 404, "resource_missing")  # not the token's run: as if unknown
    api_token[0].set_scopes(["act:all"])
    response = patch(client, f"/runs/{run.pk}", {"status": "ok"}, auth_headers)
    assert_envelope(response, 409, "invalid_input")
    assert Run.objects.get(pk=run.pk).status == Run.Status.RUNNING


def test_the_sweeper_never_takes_an_agents_running_run_for_a_stranded_one(client, auth_headers):
    run_id = started(client, auth_headers)
    later = timezone.now() + timedelta(days=2)  # far past every lease and lost-dispatch window
    assert dispatch.sweep(later) == 0
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.deliveries, run.dispatched_at, run.lease_until) == (
        Run.Status.RUNNING,
        0,
        None,
        None,
    )
    assert not Run.objects.lost_dispatches(later).exists()
    assert not Run.objects.lease_expired(later).exists()
    assert not OutboxMessage.objects.exists()


# ---------------------------------------------------------------------------------------------
# Decisions recorded on the run


def test_a_decision_is_recorded_on_the_run_once_and_paid_for_once(client, auth_headers):
    run_id = started(client, auth_headers, source="slow_api")
    timeout = failed_run(source="slow_api", retry_after=None)
    timeout = {k: v for k, v in timeout.items() if k not in ("agent", "source")}
    assert patch(client, f"/runs/{run_id}", timeout, auth_headers).status_code == 200
    first = decide(client, auth_headers, run_id)
    assert first.status_code == 200, first.content
    body = first.json()
    assert body["action"] == "retry" and body["run"] == run_id and body["budget_spent"] == 10
    tokens = SourceHealth.objects.get(source="slow_api").budget_tokens
    assert tokens == 490  # the default bucket of 500, less one timeout retry
    run = Run.objects.get(pk=run_id)
    assert (run.decision, run.decision_reason, run.policy_version) == (
        "retry",
        body["reason"],
        body["policy_version"],
    )
    assert run.decision_delay == body["delay_seconds"] and run.budget_spent == 10
    again = decide(client, auth_headers, run_id).json()
    assert again == body
    assert SourceHealth.objects.get(source="slow_api").budget_tokens == tokens


def test_an_escalation_opens_a_review_item_grouped_like_any_other(client, auth_headers):
    first = failed(client, auth_headers)
    second = failed(client, auth_headers)
    answers = [decide(client, auth_headers, run_id).json() for run_id in (first, second)]
    assert [a["action"] for a in answers] == ["escalate", "escalate"]
    items = [ReviewItem.objects.get(pk=a["review"]["id"]) for a in answers]
    assert answers[0]["review"]["url"] == f"http://testserver/review/{items[0].pk}/"
    assert items[0].signature == items[1].signature  # one group in the queue
    assert items[0].origin == "agent" and items[0].token_id == ApiToken.objects.get().pk
    assert Run.objects.get(pk=first).status == Run.Status.ESCALATED
    # Counted as the built-in coordinator's escalations are (the recovery tiles, /metrics).
    assert set(Run.objects.avoided_retries().values_list("pk", flat=True)) == {first, second}
    assert decide(client, auth_headers, first).json()["review"]["id"] == items[0].pk


def test_a_decision_needs_a_finished_failure(client, auth_headers):
    run_id = started(client, auth_headers)
    assert_envelope(decide(client, auth_headers, run_id), 409, "invalid_input")
    assert_envelope(decide(client, auth_headers, 999999), 404, "resource_missing")
    assert_envelope(post_json(client, "/decisions", {}, **auth_headers), 422, "invalid_input")
    patch(client, f"/runs/{run_id}", auth_error(), auth_headers)
    wrong = {"run": run_id, "failure": {"failure_type": "timeout"}}
    assert_envelope(post_json(client, "/decisions", wrong, **auth_headers), 422, "invalid_input")
    assert not Run.objects.get(pk=run_id).decision


# ---------------------------------------------------------------------------------------------
# Escalations and resolutions


def test_an_agent_escalates_once_per_open_item(client, auth_headers):
    run_id = failed(client, auth_headers)
    body = {"run": run_id, "reason": "the CRM key needs a human"}
    first = post_json(client, "/reviews", body, **auth_headers)
    again = post_json(client, "/reviews", body, **auth_headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"] and first.json()["state"] == "open"
    assert first.json()["url"].endswith(f"/review/{first.json()['id']}/")
    run = Run.objects.get(pk=run_id)
    assert run.decision == "escalate" and "the CRM key" in run.decision_reason
    assert_envelope(
        post_json(
            client,
            "/reviews",
            {"run": started(client, auth_headers), "reason": "x"},
            **auth_headers,
        ),
        409,
        "invalid_input",
    )


def test_a_resolution_reads_in_the_documented_shape(client, auth_headers, operator):
    run_id = failed(client, auth_headers)
    item_id = post_json(client, "/reviews", {"run": run_id, "reason": "r"}, **auth_headers).json()[
        "id"
    ]
    open_ = client.get(f"{API}/reviews/{item_id}", **auth_headers).json()
    assert open_ == {
        "id": item_id,
        "state": "open",
        "run": run_id,
        "workflow": None,
        "reason": open_["reason"],
        "blocking": True,
        "resolution": None,
        "delivered_at": None,
    }
    item = ReviewItem.objects.get(pk=item_id)
    do_resolve_review(
        item,
        operator,
        "retry_edited",
        channel=Channel.DASHBOARD,
        note="use the new key",
        edited_input={"account": "acme-2"},
    )
    body = client.get(f"{API}/reviews/{item_id}?wait=5", **auth_headers).json()
    assert body["state"] == "resolved"
    resolution = body["resolution"]
    assert set(resolution) == {
        "action",
        "input",
        "source",
        "failure_type",
        "note",
        "resolved_by",
        "resolved_at",
    }
    assert resolution["action"] == "retry_edited" and resolution["input"] == {"account": "acme-2"}
    assert (resolution["note"], resolution["resolved_by"]) == ("use the new key", "olga")
    assert resolution["source"] is None and resolution["failure_type"] is None


def test_a_wait_on_an_open_item_ends_after_its_seconds(client, auth_headers):
    item_id = post_json(
        client, "/reviews", {"run": failed(client, auth_headers), "reason": "r"}, **auth_headers
    ).json()["id"]
    with time_machine.travel(timezone.now(), tick=True):
        response = client.get(f"{API}/reviews/{item_id}?wait=0.3", **auth_headers)
    assert response.json()["state"] == "open"
    too_long = client.get(f"{API}/reviews/{item_id}?wait=31", **auth_headers)
    assert_envelope(too_long, 422, "invalid_input")


def test_the_unacknowledged_feed_lists_this_tokens_resolutions_until_acked(
    client, auth_headers, operator
):
    ids = []
    for _ in range(3):
        run_id = failed(client, auth_headers)
        item = post_json(client, "/reviews", {"run": run_id, "reason": "r"}, **auth_headers)
        ids.append(item.json()["id"])
    _, other_secret = ApiToken.issue("other-agent")
    other = {"HTTP_AUTHORIZATION": f"Bearer {other_secret}"}
    foreign = failed(client, other)
    post_json(client, "/reviews", {"run": foreign, "reason": "r"}, **other)
    for item in ReviewItem.objects.order_by("pk"):
        do_resolve_review(item, operator, "abort", channel=Channel.DASHBOARD, note="stop")
    feed = f"{API}/reviews?state=resolved&delivered=false&limit=2"
    page = client.get(feed, **auth_headers).json()
    assert [i["id"] for i in page["items"]] == ids[:2] and page["next_cursor"]
    rest = client.get(feed + f"&cursor={page['next_cursor']}", **auth_headers).json()
    assert [i["id"] for i in rest["items"]] == ids[2:] and rest["next_cursor"] is None
    acked = post_json(client, f"/reviews/{ids[0]}/ack", {}, **auth_headers).json()
    assert acked["delivered_at"] is not None
    again = post_json(client, f"/reviews/{ids[0]}/ack", {}, **auth_headers).json()
    assert again["delivered_at"] == acked["delivered_at"]  # idempotent: the first pick-up stays
    listed = client.get(feed.replace("limit=2", "limit=50"), **auth_headers).json()["items"]
    assert [i["id"] for i in listed] == ids[1:]
    refused = post_json(client, f"/reviews/{ids[1]}/ack", {}, **other)
    assert_envelope(refused, 404, "resource_missing")  # another token's item: as if unknown
    assert ReviewItem.objects.get(pk=ids[0]).delivered_via == "ack"


def test_an_open_item_cannot_be_acknowledged(client, auth_headers):
    run_id = failed(client, auth_headers)
    item_id = post_json(client, "/reviews", {"run": run_id, "reason": "r"}, **auth_headers).json()[
        "id"
    ]
    assert_envelope(
        post_json(client, f"/reviews/{item_id}/ack", {}, **auth_headers), 409, "invalid_input"
    )
    assert ReviewItem.objects.get(pk=item_id).delivered_at is None


# ---------------------------------------------------------------------------------------------
# Workflows an agent coordinates


def external_workflow(client: Client, headers: dict[str, str], **fields: Any) -> dict[str, Any]:
    body = {"name": "research", "topics": ["film", "music"], "coordinator": "external", **fields}
    response = post_json(client, "/workflows", body, **headers)
    assert response.status_code == 201, response.content
    return response.json()


def test_an_external_workflow_is_never_stepped_by_the_built_in_coordinator(client, auth_headers):
    wf = external_workflow(client, auth_headers)
    assert wf["coordinator"] == "external" and wf["capability"] == ""
    assert not OutboxMessage.objects.exists()  # no first step was written
    row = Workflow.objects.get(pk=wf["id"])
    assert not row.is_built_in and not Workflow.objects.needing_step().filter(pk=row.pk).exists()
    # Even with a capability of registered sources, and a queued run, nothing dispatches it.
    Workflow.objects.filter(pk=row.pk).update(capability="search")
    Run.objects.create(workflow=row, agent="a", source="web_search", due_at=timezone.now())
    assert dispatch.dispatch_due(timezone.now() + timedelta(seconds=1)) == 0
    assert not Workflow.objects.needing_step().filter(pk=row.pk).exists()


def test_finishing_an_external_workflow_computes_its_coverage(client, auth_headers, operator):
    wf = external_workflow(client, auth_headers)
    ok = {"status": "ok", "agent": "a", "source": "news_api", "results": [{"u": 1}, {"u": 2}]}
    post_json(client, "/runs", ok | {"workflow": wf["id"], "topic": "film"}, **auth_headers)
    music = started(client, auth_headers, workflow=wf["id"], topic="music")
    lost = {k: v for k, v in auth_error().items() if k != "partialResults"}
    patch(client, f"/runs/{music}", lost, auth_headers)
    item = post_json(client, "/reviews", {"run": music, "reason": "r"}, **auth_headers).json()
    waiting = post_json(client, f"/workflows/{wf['id']}/finish", {}, **auth_headers)
    assert waiting.status_code == 200 and waiting.json()["status"] == "awaiting_review"
    do_resolve_review(
        ReviewItem.objects.get(pk=item["id"]),
        operator,
        "accept_partial",
        channel=Channel.DASHBOARD,
        note="fine",
    )
    done = post_json(client, f"/workflows/{wf['id']}/finish", {}, **auth_headers).json()
    assert done["status"] == "degraded"
    coverage = client.get(f"{API}/workflows/{wf['id']}/coverage", **auth_headers).json()
    assert coverage["final"] and coverage["coverage"]["film"]["verdict"] == "thin"
    gap = coverage["coverage"]["music"]
    assert gap["verdict"] == "gap" and "music could not be assessed" in gap["why"]
    assert "auth_failure" in gap["why"]
    again = post_json(client, f"/workflows/{wf['id']}/finish", {}, **auth_headers).json()
    assert again["status"] == "degraded" and again["finished_at"] == done["finished_at"]


def test_a_workflow_with_runs_in_flight_or_built_in_is_not_finished_by_an_agent(
    client, auth_headers, api_token
):
    wf = external_workflow(client, auth_headers)
    started(client, auth_headers, workflow=wf["id"], topic="film")
    response = post_json(client, f"/workflows/{wf['id']}/finish", {}, **auth_headers)
    assert "still running" in assert_envelope(response, 409, "invalid_input")["detail"]
    built_in = Workflow.objects.create(name="b", capability="search", topics=["t"])
    response = post_json(client, f"/workflows/{built_in.pk}/finish", {}, **auth_headers)
    assert_envelope(response, 404, "resource_missing")  # not the token's workflow: as if unknown
    api_token[0].set_scopes(["act:all"])
    response = post_json(client, f"/workflows/{built_in.pk}/finish", {}, **auth_headers)
    assert_envelope(response, 409, "invalid_input")
    assert Workflow.objects.get(pk=built_in.pk).status == Workflow.Status.RUNNING


def test_a_built_in_workflow_still_needs_registered_sources(client, auth_headers):
    body = {"name": "r", "topics": ["t"], "capability": "nothing-registered"}
    response = post_json(client, "/workflows", body, **auth_headers)
    detail = assert_envelope(response, 422, "invalid_input")
    assert any("external" in a for a in detail["alternatives"])


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_concurrent_asks_for_one_runs_decision_decide_and_pay_once(postgres, auth_headers):
    from tests.api.test_concurrency import THREADS, race

    client = Client()
    run_id = started(client, auth_headers, source="flaky_api")
    body = {k: v for k, v in failed_run(retry_after=None).items() if k not in ("agent", "source")}
    patch(client, f"/runs/{run_id}", body, auth_headers)
    answers = race(lambda c: decide(c, auth_headers, run_id))
    assert [a.status_code for a in answers] == [200] * THREADS
    assert len({json.dumps(a.json(), sort_keys=True) for a in answers}) == 1
    assert SourceHealth.objects.get(source="flaky_api").budget_tokens == 490
