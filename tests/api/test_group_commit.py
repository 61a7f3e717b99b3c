"""Group commit of single reports: concurrent reports share one INSERT and one commit, each is
answered only once its row is committed, and idempotency keys hold inside a group and across.

The mechanism alone first (no database), then concurrent reports through the API on PostgreSQL,
where a lock on the run table held by the test keeps the first commit in flight so that the
reports arriving meanwhile form one group.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence

import psycopg
import pytest
from django.db import connection
from django.test import Client

from orchestrator.ingest import pipeline as ingest
from orchestrator.ingest.groupcommit import GroupCommit
from orchestrator.models import ApiToken, Run
from tests.api.helpers import ok_run
from tests.orchestrator.test_worker import database_url
from tests.services import wait_until


def run_together(count: int, work: Callable[[int], object]) -> list:
    results: list = [None] * count

    def one(i: int) -> None:
        results[i] = work(i)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


class BlockingStore:
    """A store function whose first call waits for `release`; it records every group."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.groups: list[list[int]] = []
        self.release = threading.Event()
        self.fail_on = fail_on

    def __call__(self, items: Sequence[int]) -> list[str]:
        self.groups.append(list(items))
        if len(self.groups) == 1:
            self.release.wait(10)
        if self.fail_on in items:
            raise RuntimeError("the database refused the group")
        return [f"stored {item}" for item in items]


def test_reports_arriving_during_a_commit_share_the_next_one():
    store = BlockingStore()
    group = GroupCommit(store, lambda: 1000)
    first = threading.Thread(target=group.submit, args=(0,))
    first.start()
    wait_until(lambda: store.groups, 5, "the first commit to start")
    later = threading.Thread(
        target=lambda: results.extend(run_together(9, lambda i: group.submit(i + 1)))
    )
    results: list = []
    later.start()
    wait_until(lambda: len(group._queue) == 9, 5, "nine reports to wait")
    store.release.set()
    later.join(10)
    first.join(10)

    assert store.groups[0] == [0]
    assert sorted(store.groups[1]) == list(range(1, 10))  # one group, not nine commits
    assert results == [f"stored {i}" for i in range(1, 10)]  # each its own answer


def test_a_group_holds_at_most_the_limit_and_the_rest_follow():
    store = BlockingStore()
    group = GroupCommit(store, lambda: 4)
    first = threading.Thread(target=group.submit, args=(0,))
    first.start()
    wait_until(lambda: store.groups, 5, "the first commit to start")
    later = threading.Thread(target=run_together, args=(10, lambda i: group.submit(i + 1)))
    later.start()
    wait_until(lambda: len(group._queue) == 10, 5, "ten reports to wait")
    store.release.set()
    later.join(10)
    first.join(10)

    assert [len(g) for g in store.groups] == [1, 4, 4, 2]
    assert sorted(i for g in store.groups for i in g) == list(range(11))


def test_a_failed_group_fails_each_of_its_reports_and_the_next_group_commits():
    store = BlockingStore(fail_on=3)
    group = GroupCommit(store, lambda: 1000)

    def submit(i: int) -> str:
        try:
            return group.submit(i)
        except RuntimeError as exc:
            return str(exc)

    store.release.set()
    assert submit(3) == "the database refused the group"
    assert submit(4) == "stored 4"  # the lead was handed back: nobody is left waiting


# ---------------------------------------------------------------------------------------------
# Through the API on PostgreSQL

db_threads = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def report(secret: str, body: dict, key: str) -> tuple[int, dict, bool, float]:
    """POST one report from this thread; return status, answer, replayed, when it came back."""
    try:
        response = Client().post(
            "/api/v1/runs",
            data=json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {secret}",
            HTTP_IDEMPOTENCY_KEY=key,
        )
        replayed = response.headers.get("Idempotent-Replayed") == "true"
        return response.status_code, response.json(), replayed, time.monotonic()
    finally:
        connection.close()  # this thread's connection goes back to the pool


def committed_ids() -> set[int]:
    """The run ids another session sees: committed ones only."""
    with psycopg.connect(database_url(), autocommit=True) as conn:
        return {row[0] for row in conn.execute("SELECT id FROM orchestrator_run")}


@db_threads
def test_concurrent_reports_are_grouped_and_answered_only_once_committed(postgres):
    _, secret = ApiToken.issue("busy-agent")
    groups_before = ingest.GROUP.groups
    with psycopg.connect(database_url()) as lock:
        lock.execute("LOCK TABLE orchestrator_run IN EXCLUSIVE MODE")
        first = threading.Thread(target=report, args=(secret, ok_run(topic="t0"), "k0"))
        first.start()
        wait_until(lambda: ingest.GROUP._leading, 10, "the first commit to start")
        later: list = []
        reporters = threading.Thread(
            target=lambda: later.extend(
                run_together(
                    24, lambda i: report(secret, ok_run(topic=f"t{i % 12}"), f"k{i % 12 + 1}")
                )
            )
        )
        reporters.start()
        wait_until(lambda: len(ingest.GROUP._queue) == 24, 20, "24 reports to wait")
        time.sleep(0.2)
        released = time.monotonic()
        lock.commit()
    reporters.join(30)
    first.join(30)

    assert all(answer[3] >= released for answer in later)  # nobody answered before its commit
    assert {answer[0] for answer in later} == {201}
    stored = committed_ids()
    assert all(answer[1]["id"] in stored for answer in later)
    # Each key once: of the two reports per key, one created it and the other got it back.
    by_key: dict[str, list] = {}
    for i, answer in enumerate(later):
        by_key.setdefault(f"k{i % 12 + 1}", []).append(answer)
    for answers in by_key.values():
        assert len({a[1]["id"] for a in answers}) == 1
        assert sorted(a[2] for a in answers) == [False, True]
    assert Run.objects.count() == 13
    assert ingest.GROUP.groups - groups_before == 2  # the first alone, then all 24 together


@db_threads
def test_in_one_group_a_bad_report_is_refused_alone_and_a_reused_key_is_a_409(postgres):
    _, secret = ApiToken.issue("busy-agent")
    bodies = [
        (ok_run(topic="good"), "good"),
        (ok_run(topic="orphan", retry_of=987654, attempt=2), "orphan"),
        (ok_run(topic="one body"), "same-key"),
        (ok_run(topic="another body"), "same-key"),
    ]
    with psycopg.connect(database_url()) as lock:
        lock.execute("LOCK TABLE orchestrator_run IN EXCLUSIVE MODE")
        first = threading.Thread(target=report, args=(secret, ok_run(topic="first"), "first"))
        first.start()
        wait_until(lambda: ingest.GROUP._leading, 10, "the first commit to start")
        answers: list = []
        reporters = threading.Thread(
            target=lambda: answers.extend(run_together(4, lambda i: report(secret, *bodies[i])))
        )
        reporters.start()
        wait_until(lambda: len(ingest.GROUP._queue) == 4, 20, "4 reports to wait")
        lock.commit()
    reporters.join(30)
    first.join(30)

    good, orphan, *same_key = answers
    assert good[0] == 201
    assert orphan[0] == 422 and orphan[1]["errors"][0]["path"] == "retry_of"
    assert sorted(a[0] for a in same_key) == [201, 409]
    assert set(Run.objects.values_list("topic", flat=True)) == {
        "first",
        "good",
        *(a[1]["topic"] for a in same_key if a[0] == 201),
    }


@db_threads
def test_one_group_stores_several_tokens_reports_each_under_its_own_keys(postgres):
    secrets = [ApiToken.issue(f"agent-{i}")[1] for i in range(3)]
    groups_before = ingest.GROUP.groups
    with psycopg.connect(database_url()) as lock:
        lock.execute("LOCK TABLE orchestrator_run IN EXCLUSIVE MODE")
        first = threading.Thread(target=report, args=(secrets[0], ok_run(topic="first"), "first"))
        first.start()
        wait_until(lambda: ingest.GROUP._leading, 10, "the first commit to start")
        answers: list = []
        reporters = threading.Thread(
            target=lambda: answers.extend(
                run_together(
                    6, lambda i: report(secrets[i % 3], ok_run(topic=f"t{i % 3}"), "shared")
                )
            )
        )
        reporters.start()
        wait_until(lambda: len(ingest.GROUP._queue) == 6, 20, "6 reports to wait")
        lock.commit()
    reporters.join(30)
    first.join(30)

    assert ingest.GROUP.groups - groups_before == 2
    assert [a[0] for a in answers] == [201] * 6
    # Keys are per token: each token's report stored once under "shared", its repeat replayed.
    assert sorted(a[2] for a in answers) == [False] * 3 + [True] * 3
    stored = Run.objects.filter(idempotency_key="shared")
    assert sorted(stored.values_list("topic", flat=True)) == ["t0", "t1", "t2"]
    assert len({a[1]["id"] for a in answers}) == 3
