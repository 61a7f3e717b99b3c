"""The kombu behaviour the Redis settings work around (config/settings.py, docs/deployment.md):
an acknowledgement refused while Redis is down is logged ("Couldn't ack") and dropped, and the
message stays counted against the channel's prefetch limit, so a channel whose every slot went
that way never asks for a message again. Against a private Redis, through kombu's public API.
If a kombu release fixes it, this test fails: the workaround (`worker_disable_prefetch` with no
kombu limit) can then go."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator

import pytest
from kombu import Connection, Consumer, Exchange, Message, Queue

from config.celery import app
from tests.conftest import require_service
from tests.services import PrivateRedis

PREFETCH = 2


@pytest.fixture
def redis() -> Iterator[PrivateRedis]:
    require_service(shutil.which("redis-server") is not None, "redis-server")
    server = PrivateRedis().start()
    try:
        yield server
    finally:
        server.remove()


def publish(conn: Connection, queue: Queue, count: int) -> None:
    with conn.Producer() as producer:
        for n in range(count):
            producer.publish({"n": n}, exchange=queue.exchange, routing_key="acks", declare=[queue])


def test_acks_refused_during_an_outage_keep_the_channel_from_consuming_again(redis, caplog):
    queue = Queue("acks", Exchange("acks"), "acks")
    log = logging.getLogger("acks")
    with Connection(redis.url(0)) as conn:
        publish(conn, queue, 2 * PREFETCH)
        channel = conn.channel()
        channel.basic_qos(0, PREFETCH, False)
        held: list[Message] = []
        with Consumer(channel, [queue], callbacks=[lambda _body, message: held.append(message)]):

            def fill() -> None:
                held.clear()
                while len(held) < PREFETCH:
                    conn.drain_events(timeout=5)
                assert not channel.qos.can_consume()  # every slot taken, as while tasks run

            fill()
            for message in held:
                message.ack_log_error(log, conn.connection_errors)
            assert channel.qos.can_consume()  # acknowledged: the slots are free again

            fill()
            redis.kill()
            with caplog.at_level(logging.CRITICAL):
                for message in held:
                    message.ack_log_error(log, conn.connection_errors)
            redis.start()

        assert caplog.text.count("Couldn't ack") == PREFETCH
        assert not channel.qos.can_consume()  # the refused acks hold every slot for good


def test_on_redis_the_workers_take_a_message_only_when_a_pool_process_is_free():
    """What config/settings.py sets against it (read by the Celery app on a Redis URL)."""
    if not app.conf.broker_url.startswith("redis://"):
        pytest.skip("the settings under test are Redis's")
    assert app.conf.worker_disable_prefetch is True
    assert app.conf.worker_prefetch_multiplier == 0
