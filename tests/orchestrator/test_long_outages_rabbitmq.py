"""Ten RabbitMQ outages of 10-12 s under load (tests/orchestrator/outages.py): a private node's
application is stopped, which closes every connection and the listener, and started again
after the outage, while both pool processes run a task whose acknowledgement meets the closed
connection. RabbitMQ gives an unacknowledged message back when its connection closes, so the
task runs again unless the run's lease refuses it. The worker must go on consuming after every
outage and every workflow settle within a minute of the last, none lost, none run twice."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from orchestrator.coordination import dispatch
from tests.conftest import require_service
from tests.orchestrator import outages
from tests.services import PrivateRabbitMQ, rabbitmq_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(480),
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


@pytest.fixture
def rabbitmq(postgres) -> Iterator[PrivateRabbitMQ]:
    require_service(rabbitmq_available(), "rabbitmq-server")
    node = PrivateRabbitMQ()
    try:
        yield node.start()
    finally:
        node.remove()


def test_a_rabbitmq_worker_consumes_after_ten_outages_under_load_and_every_workflow_settles(
    rabbitmq, tmp_path, monkeypatch
):
    with outages.processes(rabbitmq.url(), tmp_path) as (worker, _):
        monkeypatch.setattr(dispatch, "dispatcher", outages.PrivateDispatcher(rabbitmq.url()))
        outcome = outages.ten_outages(rabbitmq.stop_app, rabbitmq.start_app, worker, tmp_path)
        print(outcome)
        assert outcome.settle_seconds <= outages.SETTLE_SECONDS
        outages.assert_consumed_after_the_outages(worker, outcome)
