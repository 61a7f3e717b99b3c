"""The pooled connections of the PostgreSQL backend (config.postgresql): when the server has ended
every idle connection of the pool (as a restart does), the next query still runs, on a new one."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from orchestrator.models import Run
from tests.orchestrator.test_worker import database_url

IDLE = 4  # more broken connections than psycopg's pool would try within its timeout


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_a_query_after_every_idle_pooled_connection_was_ended_runs_on_a_new_one(postgres):
    connection.ensure_connection()  # the pool is open
    connection.close()  # and this thread's connection back in it
    pool = connection.pool
    held = [pool.getconn() for _ in range(IDLE)]
    pids = [conn.info.backend_pid for conn in held]
    for conn in held:
        pool.putconn(conn)
    with psycopg.connect(database_url(), autocommit=True) as admin:
        ended = admin.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM unnest(%s::int[]) pid",
            [pids],
        ).fetchone()[0]
    assert ended == IDLE

    assert Run.objects.count() == 0
    assert connection.connection.info.backend_pid not in pids
