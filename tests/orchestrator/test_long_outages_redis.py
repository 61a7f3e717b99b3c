"""Ten Redis outages of 10-12 s under load (tests/orchestrator/outages.py): the private Redis is
killed (what it held is gone) and started again after the outage, while both pool processes run
a task (whose acknowledgement may meet the dead broker: tests/orchestrator/test_redis_ack_limit.py
shows what kombu does then). The worker must go on consuming after every outage and every
workflow settle within a minute of the last, none lost, none run twice."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from orchestrator.coordination import dispatch
from tests.conftest import require_service
from tests.orchestrator import outages
from tests.services import PrivateRedis

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(420),
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


@pytest.fixture
def redis(postgres) -> Iterator[PrivateRedis]:
    require_service(shutil.which("redis-server") is not None, "redis-server")
    server = PrivateRedis().start()
    try:
        yield server
    finally:
        server.remove()


def test_a_redis_worker_consumes_after_ten_outages_under_load_and_every_workflow_settles(
    redis, tmp_path, monkeypatch
):
    with outages.processes(redis.url(0), tmp_path, CELERY_VISIBILITY_TIMEOUT="10") as (worker, _):
        monkeypatch.setattr(dispatch, "dispatcher", outages.PrivateDispatcher(redis.url(0)))
        outcome = outages.ten_outages(redis.kill, redis.start, worker, tmp_path)
        print(outcome)
        assert outcome.settle_seconds <= outages.SETTLE_SECONDS
        outages.assert_consumed_after_the_outages(worker, outcome)
