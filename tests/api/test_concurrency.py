"""Concurrent repeats of one idempotency key store exactly one run (PostgreSQL, real threads).

Each thread has its own database connection (Django's connections are per thread), so the
requests really race inside PostgreSQL; the unique constraint and ON CONFLICT must arbitrate.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from django.db import connection
from django.test import Client

from orchestrator.models import Run
from tests.api.helpers import failed_run, ok_run, post_json

THREADS = 8


def race(work: Callable[[Client], Any]) -> list[Any]:
    """Run `work` in THREADS threads released at once; return their results."""
    barrier = threading.Barrier(THREADS)

    def one() -> Any:
        try:
            client = Client()
            barrier.wait()
            return work(client)
        finally:
            connection.close()  # this thread's connection, back to the pool

    with ThreadPoolExecutor(THREADS) as pool:
        return [future.result() for future in [pool.submit(one) for _ in range(THREADS)]]


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_concurrent_repeats_of_one_report_store_one_run(postgres, auth_headers):
    headers = {**auth_headers, "HTTP_IDEMPOTENCY_KEY": "race-1"}
    responses = race(lambda client: post_json(client, "/runs", failed_run(), **headers))
    assert [r.status_code for r in responses] == [201] * THREADS
    assert len({r.json()["id"] for r in responses}) == 1
    assert Run.objects.filter(idempotency_key="race-1").count() == 1


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_concurrent_different_bodies_for_one_key_store_one_and_refuse_the_rest(
    postgres, auth_headers
):
    headers = {**auth_headers, "HTTP_IDEMPOTENCY_KEY": "race-2"}
    counter = iter(range(THREADS))
    lock = threading.Lock()

    def post(client: Client) -> Any:
        with lock:
            topic = f"topic-{next(counter)}"
        return post_json(client, "/runs", ok_run(topic=topic), **headers)

    codes = sorted(r.status_code for r in race(post))
    assert codes == [201] + [409] * (THREADS - 1)
    assert Run.objects.filter(idempotency_key="race-2").count() == 1


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_concurrent_overlapping_batches_store_each_key_once(postgres, auth_headers):
    runs = [ok_run(idempotency_key=f"b{i}", results=[]) for i in range(200)]

    def post(client: Client) -> Any:
        # Each thread sends the keys in another order: the server must not deadlock on them.
        order = runs[::-1] if threading.get_ident() % 2 else runs
        return post_json(client, "/runs/batch", {"runs": order}, **auth_headers)

    responses = race(post)
    assert [r.status_code for r in responses] == [200] * THREADS
    created = [i for r in responses for i in r.json()["results"] if i["status"] == "created"]
    existing = [i for r in responses for i in r.json()["results"] if i["status"] == "existing"]
    assert len(created) == 200
    assert len(existing) == 200 * (THREADS - 1)
    assert {i["id"] for i in existing} == {i["id"] for i in created}
    assert Run.objects.count() == 200
