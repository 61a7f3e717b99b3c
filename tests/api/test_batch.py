"""POST /runs/batch judges each item alone: created, existing, or rejected with the reason."""

from __future__ import annotations

from django.test import override_settings

from orchestrator.models import Run, Workflow
from tests.api.helpers import assert_envelope, error_paths, failed_run, ok_run, post_json


def post_batch(client, auth_headers, runs):
    return post_json(client, "/runs/batch", {"runs": runs}, **auth_headers)


def statuses(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["status"] for item in response.json()["results"]]


def test_a_batch_stores_every_valid_run_in_order(client, auth_headers):
    runs = [ok_run(idempotency_key=f"k{i}", topic=f"t{i}") for i in range(5)]
    response = post_batch(client, auth_headers, runs)
    assert statuses(response) == ["created"] * 5
    results = response.json()["results"]
    assert [item["index"] for item in results] == list(range(5))
    stored = dict(Run.objects.values_list("pk", "topic"))
    assert [stored[item["id"]] for item in results] == [f"t{i}" for i in range(5)]


def test_one_bad_item_does_not_lose_the_others(client, auth_headers):
    runs = [
        ok_run(idempotency_key="good-1"),
        failed_run(idempotency_key="bad-type", failure_type="meteor_strike"),
        failed_run(idempotency_key="good-2"),
        "not an object",
        ok_run(idempotency_key="bad-ok", failure_type="timeout"),
        ok_run(idempotency_key="bad-agent", agent="a" * 101),
        ok_run(idempotency_key="bad-workflow", workflow=123456),
        ok_run(),  # no key: stored, but a repeat would store it again
    ]
    response = post_batch(client, auth_headers, runs)
    assert statuses(response) == [
        "created",
        "rejected",
        "created",
        "rejected",
        "rejected",
        "rejected",
        "rejected",
        "created",
    ]
    results = response.json()["results"]
    paths = [
        {e["path"] for e in item["error"]["errors"]} if item["error"] else None for item in results
    ]
    assert paths[1] == {"runs.1.failure_type"}
    assert paths[3] == {"runs.3"}
    assert paths[4] == {"runs.4.failure_type"}
    assert paths[5] == {"runs.5.agent"}
    assert paths[6] == {"runs.6.workflow"}
    assert all(
        item["error"]["failure_type"] == "invalid_input" for item in results if item["error"]
    )
    assert all(item["id"] is None for item in results if item["status"] == "rejected")
    assert Run.objects.count() == 3


def test_repeating_a_batch_reports_existing_runs_and_stores_nothing(client, auth_headers):
    runs = [ok_run(idempotency_key=f"k{i}") for i in range(3)] + [failed_run(idempotency_key="f")]
    first = post_batch(client, auth_headers, runs)
    second = post_batch(client, auth_headers, runs)
    assert statuses(second) == ["existing"] * 4
    ids = [item["id"] for item in first.json()["results"]]
    assert [item["id"] for item in second.json()["results"]] == ids
    assert Run.objects.count() == 4


def test_a_key_reused_for_a_different_body_is_rejected_with_the_reason(client, auth_headers):
    post_batch(client, auth_headers, [ok_run(idempotency_key="k")])
    response = post_batch(
        client,
        auth_headers,
        [ok_run(idempotency_key="k", topic="other"), ok_run(idempotency_key="n")],
    )
    assert statuses(response) == ["rejected", "created"]
    error = response.json()["results"][0]["error"]
    assert "already used for a different run" in error["detail"]
    assert error["errors"][0]["path"] == "runs.0.idempotency_key"


def test_a_key_twice_in_one_batch_is_stored_once(client, auth_headers):
    runs = [
        ok_run(idempotency_key="dup"),
        ok_run(idempotency_key="dup"),
        ok_run(idempotency_key="dup", topic="different"),
    ]
    response = post_batch(client, auth_headers, runs)
    assert statuses(response) == ["created", "existing", "rejected"]
    results = response.json()["results"]
    assert results[0]["id"] == results[1]["id"]
    assert Run.objects.count() == 1


def test_a_single_report_and_a_batch_item_share_the_key_space(client, auth_headers):
    single = post_json(client, "/runs", ok_run(), HTTP_IDEMPOTENCY_KEY="same", **auth_headers)
    response = post_batch(client, auth_headers, [ok_run(idempotency_key="same")])
    assert statuses(response) == ["existing"]
    assert response.json()["results"][0]["id"] == single.json()["id"]


def test_a_retry_attempt_already_recorded_is_rejected_alone(client, auth_headers, api_token):
    workflow = Workflow.objects.create(name="research", token=api_token[0])
    first = post_batch(
        client, auth_headers, [failed_run(workflow=workflow.pk, idempotency_key="a1")]
    )
    first_id = first.json()["results"][0]["id"]
    retry = failed_run(retry_of=first_id, attempt=2, idempotency_key="a2")
    runs = [retry, failed_run(retry_of=first_id, attempt=2, idempotency_key="a2-again"), ok_run()]
    response = post_batch(client, auth_headers, runs)
    assert statuses(response) == ["created", "rejected", "created"]
    assert statuses(post_batch(client, auth_headers, [retry])) == ["existing"]
    other = post_batch(client, auth_headers, [failed_run(retry_of=first_id, attempt=2)])
    assert statuses(other) == ["rejected"]
    assert other.json()["results"][0]["error"]["errors"][0]["path"] == "runs.0.attempt"


def test_valid_empty_and_failed_runs_are_stored_apart(client, auth_headers):
    runs = [ok_run(results=[], idempotency_key="empty"), failed_run(idempotency_key="failed")]
    statuses(post_batch(client, auth_headers, runs))
    assert list(Run.objects.valid_empty().values_list("idempotency_key", flat=True)) == ["empty"]
    assert list(Run.objects.failed().values_list("idempotency_key", flat=True)) == ["failed"]


@override_settings(API_MAX_BATCH=3)
def test_a_batch_over_the_limit_is_refused_whole(client, auth_headers):
    response = post_batch(client, auth_headers, [ok_run() for _ in range(4)])
    assert error_paths(assert_envelope(response, 422, "invalid_input")) == {"runs"}
    assert Run.objects.count() == 0


def test_a_batch_without_a_runs_list_is_a_422(client, auth_headers):
    for body in ({}, {"runs": "x"}, {"runs": [], "extra": 1}, [ok_run()]):
        response = post_json(client, "/runs/batch", body, **auth_headers)
        assert_envelope(response, 422, "invalid_input")


def test_an_empty_batch_is_an_empty_answer(client, auth_headers):
    response = post_batch(client, auth_headers, [])
    assert response.json() == {"results": []}


def test_a_batch_larger_than_one_statement_can_bind_is_stored_whole(client, auth_headers):
    # SQLite binds at most 32,766 parameters a statement: 1,000 runs need two statements there.
    runs = [ok_run(idempotency_key=f"k{i}", results=[]) for i in range(1000)]
    assert statuses(post_batch(client, auth_headers, runs)) == ["created"] * 1000
    assert Run.objects.count() == 1000


def test_each_failure_is_stored_with_its_group_signature(client, auth_headers):
    from orchestrator.fingerprint import signature

    runs = [
        failed_run(idempotency_key="f1", detail="ReadTimeout after 10 s (request 'a1b2')"),
        failed_run(idempotency_key="f2", detail="ReadTimeout after 12 s (request 'c3d4')"),
        failed_run(idempotency_key="f3", source="web_search", detail="ReadTimeout after 10 s"),
        ok_run(idempotency_key="ok"),
    ]
    assert statuses(post_batch(client, auth_headers, runs)) == ["created"] * 4
    stored = dict(Run.objects.values_list("idempotency_key", "signature"))
    # The same error with other numbers and quoted ids is one group; another source is another.
    same = signature("news_api", "timeout", "ReadTimeout after 1 s (request 'x9')")
    assert stored["f1"] == stored["f2"] == same
    assert stored["f3"] not in ("", stored["f1"]) and stored["ok"] == ""


def test_an_astronomic_retry_after_is_capped_at_a_day_not_a_server_error(client, auth_headers):
    """A finite wait of 10**184 s would overflow the hold it opens on the source (found by
    schemathesis); it is capped at a day, as the classifier caps a Retry-After header."""
    run = failed_run(failure_type="rate_limited", retry_after=4.7e184, idempotency_key="far")
    response = post_batch(client, auth_headers, [run])
    assert statuses(response) == ["created"]
    stored = Run.objects.get(pk=response.json()["results"][0]["id"])
    assert stored.retry_after == 86_400
    single = post_json(client, "/runs", failed_run(failure_type="rate_limited", retry_after=1e300),
                       **auth_headers)  # fmt: skip
    assert single.status_code == 201, single.content
    decision = post_json(
        client,
        "/decisions",
        {"failure": {"failure_type": "rate_limited", "retry_after": 1e300}, "source": "s"},
        **auth_headers,
    )
    assert decision.status_code == 200, decision.content
    assert decision.json()["delay_seconds"] <= 86_400
