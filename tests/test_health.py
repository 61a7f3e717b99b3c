"""/healthz and /readyz through Django: answered for any Host and without signing in, with nothing
in the body but the status (the reason goes to the log). That the server as served sends them
past its admission limit is tests/test_web.py's."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

from tests.dashboard.test_system import DEAD_BROKER, broker_at

pytestmark = pytest.mark.django_db


def test_healthz_answers_ok_for_any_host_without_the_database(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        response = client.get("/healthz", headers={"Host": "10.1.2.3:8000"})
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"
    assert client.head("/healthz").status_code == 200


def test_readyz_is_ok_with_the_database_migrated_and_the_broker_answering(client):
    response = client.get("/readyz", headers={"Host": "10.1.2.3:8000"})
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok"}


def test_readyz_is_unavailable_without_the_broker_and_says_why_only_in_the_log(client, caplog):
    with broker_at(DEAD_BROKER):
        response = client.get("/readyz")
    assert response.status_code == 503
    assert json.loads(response.content) == {"status": "unavailable"}
    assert "readyz: broker unavailable" in caplog.text and "127.0.0.1:1" in caplog.text


def test_readyz_is_unavailable_while_a_migration_is_not_applied(client, caplog):
    recorder = MigrationRecorder(connection)
    app, name = max(r for r in recorder.applied_migrations() if r[0] == "orchestrator")
    recorder.record_unapplied(app, name)
    response = client.get("/readyz")
    assert response.status_code == 503 and response.json() == {"status": "unavailable"}
    assert "readyz: migrations not ready" in caplog.text
    recorder.record_applied(app, name)
    assert client.get("/readyz").status_code == 200


def test_other_methods_and_paths_are_not_probes(client):
    assert client.post("/healthz").status_code == 404
    assert client.get("/healthz/").status_code == 404
