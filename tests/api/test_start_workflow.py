"""POST /api/v1/workflows: an Idempotency-Key as for runs, and a broker outage that delays the
start instead of failing an accepted request.

The outage is real: this process's Celery app is pointed at a port where no broker listens, so
kombu raises what it raises when Redis is down (tests/orchestrator/test_chaos.py stops a real
Redis in the middle of live workflows).
"""

from __future__ import annotations

import socket

import pytest
from django.test import Client

from orchestrator.coordination import dispatch
from orchestrator.models import OutboxMessage, Workflow
from tests.api.helpers import assert_envelope, error_paths, post_json
from tests.api.test_concurrency import THREADS, race
from tests.orchestrator.test_worker import app_sending_to

BODY = {"name": "AI impact", "topics": ["film", "music"], "capability": "news"}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # nothing listens there once the socket is closed


def test_a_repeated_start_with_one_key_returns_the_stored_workflow(client, auth_headers):
    headers = {**auth_headers, "HTTP_IDEMPOTENCY_KEY": "start-1"}
    first = post_json(client, "/workflows", BODY, **headers)
    again = post_json(client, "/workflows", BODY, **headers)
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json()["id"] == first.json()["id"]
    assert "Idempotent-Replayed" not in first and again["Idempotent-Replayed"] == "true"
    assert Workflow.objects.count() == 1
    assert OutboxMessage.objects.filter(task=dispatch.STEP_TASK).count() == 1  # started once


def test_a_key_reused_for_another_body_is_a_409(client, auth_headers):
    headers = {**auth_headers, "HTTP_IDEMPOTENCY_KEY": "start-2"}
    first = post_json(client, "/workflows", BODY, **headers)
    other = post_json(client, "/workflows", {**BODY, "topics": ["games"]}, **headers)
    body = assert_envelope(other, 409, "invalid_input")
    assert error_paths(body) == {"Idempotency-Key"}
    assert str(first.json()["id"]) in body["detail"]
    assert Workflow.objects.count() == 1


def test_keys_are_per_token_and_starts_without_one_are_distinct(client, auth_headers):
    from orchestrator.models import ApiToken

    _, other_secret = ApiToken.issue("another-agent")
    key = {"HTTP_IDEMPOTENCY_KEY": "shared"}
    mine = post_json(client, "/workflows", BODY, **auth_headers, **key)
    other = {"HTTP_AUTHORIZATION": f"Bearer {other_secret}"}
    theirs = post_json(client, "/workflows", BODY, **other, **key)
    assert mine.json()["id"] != theirs.json()["id"]
    post_json(client, "/workflows", BODY, **auth_headers)
    post_json(client, "/workflows", BODY, **auth_headers)
    assert Workflow.objects.count() == 4


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_concurrent_starts_with_one_key_make_one_workflow(postgres, auth_headers):
    headers = {**auth_headers, "HTTP_IDEMPOTENCY_KEY": "race-start"}
    responses = race(lambda c: post_json(c, "/workflows", BODY, **headers))
    assert [r.status_code for r in responses] == [201] * THREADS
    assert len({r.json()["id"] for r in responses}) == 1
    assert Workflow.objects.count() == 1


def test_a_start_while_the_broker_is_down_is_accepted_and_its_step_waits_in_the_outbox(
    client, auth_headers, django_capture_on_commit_callbacks
):
    headers = {**auth_headers, "HTTP_IDEMPOTENCY_KEY": "outage-1"}
    with app_sending_to(f"redis://127.0.0.1:{closed_port()}/0", "nowhere"):
        with django_capture_on_commit_callbacks(execute=True):
            response = post_json(client, "/workflows", BODY, **headers)
        with django_capture_on_commit_callbacks(execute=True):
            retried = post_json(client, "/workflows", BODY, **headers)  # the client's retry
    assert response.status_code == 201, response.content
    assert retried.status_code == 201 and retried.json()["id"] == response.json()["id"]
    assert Workflow.objects.count() == 1
    message = OutboxMessage.objects.get()
    assert message.args == [response.json()["id"], None]
    assert "refused" in message.last_error.lower() or "connect" in message.last_error.lower()


def test_an_unauthenticated_start_is_refused(db):
    response = post_json(Client(), "/workflows", BODY, HTTP_IDEMPOTENCY_KEY="x")
    assert_envelope(response, 401, "auth_failure")
