"""`POST /decisions` answers a policy's switch and escalate to agents' own coordinators: switch
now (`switch_source`, `escalate: true`), and with a reported run the review item asking a person
to repair the failing source, which no workflow waits for."""

from __future__ import annotations

from orchestrator.models import ReviewItem, Run, Workflow
from tests.api.helpers import post_json
from tests.api.test_agent_loop import auth_error, decide, external_workflow, patch, started
from tests.orchestrator.test_switch_and_escalate import switch_and_escalate_auth_failures


def test_a_reported_run_is_switched_and_its_repair_item_named(client, auth_headers):
    switch_and_escalate_auth_failures()
    wf = external_workflow(client, auth_headers, capability="news", topics=["film"])
    run_id = started(client, auth_headers, source="news_wire", workflow=wf["id"], topic="film")
    assert patch(client, f"/runs/{run_id}", auth_error(), auth_headers).status_code == 200
    answer = decide(client, auth_headers, run_id)
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert (body["action"], body["escalate"]) == ("switch_source", True)
    assert body["switch_to"] in ("news_api", "news_archive")
    item = ReviewItem.objects.get(pk=body["review"]["id"])
    assert item.blocking is False and item.run_id == run_id and item.origin == "agent"
    assert Run.objects.get(pk=run_id).decision == "switch_source"
    # Asked again: the same answer, the same item.
    assert decide(client, auth_headers, run_id).json() == body
    # The agent switches; its workflow finishes on the alternative while the item is open.
    ok = {"status": "ok", "agent": "a", "source": body["switch_to"], "results": [{"u": 1}]}
    post_json(client, "/runs", ok | {"workflow": wf["id"], "topic": "film"}, **auth_headers)
    done = post_json(client, f"/workflows/{wf['id']}/finish", {}, **auth_headers).json()
    assert done["status"] == Workflow.Status.SUCCEEDED
    item.refresh_from_db()
    assert item.state == ReviewItem.State.OPEN


def test_without_a_run_the_answer_says_switch_and_escalate(client, auth_headers):
    switch_and_escalate_auth_failures()
    failure = {"failure_type": "auth_failure", "status_code": 401, "detail": "key expired"}
    body = {"failure": failure, "source": "news_wire", "tried": ["news_api"]}
    answer = post_json(client, "/decisions", body, **auth_headers).json()
    assert (answer["action"], answer["switch_to"], answer["escalate"]) == (
        "switch_source",
        "news_archive",
        True,
    )
    assert answer["review"] is None and "a person is asked to repair news_wire" in answer["reason"]
    # With nowhere to switch to, the same failure waits for a person.
    nowhere = {"failure": failure, "source": "crm_api"}
    alone = post_json(client, "/decisions", nowhere, **auth_headers)
    assert (alone.json()["action"], alone.json()["escalate"]) == ("escalate", False)
