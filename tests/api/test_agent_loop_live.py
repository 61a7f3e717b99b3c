"""The whole loop of an agent's own coordinator, live: the Python client over HTTP against a live
server, a real Celery worker on PostgreSQL and Redis, an operator in a real headless Chromium,
and webhook receivers that are real HTTP servers on this machine.

One worker (two pool processes, embedded beat) serves the whole module; each test has its own
database content (transactional, restored after). Faults are real: a receiver answering 500, a
worker child SIGKILLed mid-delivery, a receiver slower than the attempt's timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from django.db import connections

from orchestrator.client import AgentClient, verify_signature
from orchestrator.coordination.actions import do_resolve_review
from orchestrator.models import (
    ApiToken,
    AuditEntry,
    ReviewItem,
    Run,
    WebhookAttempt,
    WebhookDelivery,
)
from orchestrator.vocabulary import Channel
from tests.conftest import require_service
from tests.dashboard.test_browser import browser, login, page  # noqa: F401  (fixtures)
from tests.orchestrator.test_worker import (
    CELERY,
    ROOT,
    SESSION_QUEUE,
    Worker,
    app_sending_to,
    redis_available,
    redis_url,
    worker_env,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, serialized_rollback=True)]

# A resolution carries no credential: the server filters secrets out of it (`[Filtered]`).
EDITED = {"query": "ACME", "region": "eu-west"}


class PoolWorker(Worker):
    """The test worker with two pool processes: one slow delivery must not hold the other."""

    def start(self) -> None:
        cmd = [str(CELERY), "-A", "config", "worker", "-B", "--pool=prefork", "-c", "2"]
        cmd += ["-Q", self.env["CELERY_TASK_DEFAULT_QUEUE"], "--loglevel=INFO", "--without-mingle"]
        cmd += ["--without-gossip", "-n", f"{uuid.uuid4().hex[:6]}@%h"]
        cmd += ["-s", str(self.log.parent / "beat-schedule")]
        with self.log.open("a") as out:
            self.proc = subprocess_popen(cmd, self.env, out)
        deadline = time.monotonic() + 60
        while "ready." not in self.log.read_text():
            if time.monotonic() > deadline:
                pytest.fail("the worker did not start\n" + self.tail())
            time.sleep(0.2)


def subprocess_popen(cmd: list[str], env: dict[str, str], out: Any) -> Any:
    import subprocess

    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )


@pytest.fixture(scope="module")
def celery_worker(django_db_setup, tmp_path_factory) -> Iterator[PoolWorker]:
    url = redis_url()
    require_service(redis_available(url), f"Redis at {url}")
    from django.db import connection

    require_service(connection.vendor == "postgresql", "PostgreSQL")
    var = tmp_path_factory.mktemp("loop-worker")
    queue = f"{SESSION_QUEUE}-loop"
    env = worker_env(url, queue, var) | {
        "WEBHOOK_TIMEOUT_SECONDS": "5",
    }
    worker = PoolWorker(env=env, log=var / "worker.log", calls_log=var / "calls.jsonl")
    with app_sending_to(url, queue):
        worker.start()
        try:
            yield worker
        finally:
            worker.stop()
            connections.close_all()


class Receiver:
    """A webhook receiver: a real HTTP server that records each request and answers with the
    next of `answers` (a status, or ("slow", seconds, status)), then 200."""

    def __init__(self, answers: list[Any] | None = None) -> None:
        self.answers = list(answers or [])
        self.requests: list[tuple[float, dict[str, str], bytes]] = []
        self.arrived = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((time.monotonic(), dict(self.headers), body))
                receiver.arrived.set()
                answer = receiver.answers.pop(0) if receiver.answers else 200
                if isinstance(answer, tuple):
                    time.sleep(answer[1])
                    answer = answer[2]
                with contextlib.suppress(OSError):  # the sender may have given up meanwhile
                    self.send_response(answer)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/failsight"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def delivery_ids(self) -> list[str]:
        return [headers["Failsight-Delivery"] for _, headers, _ in self.requests]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def receiving(*answers: Any) -> Iterator[Receiver]:
    receiver = Receiver(list(answers))
    try:
        yield receiver
    finally:
        receiver.close()


def auth_error() -> httpx.HTTPStatusError:
    """A real 401 from httpx, as the agent's tool call got it."""
    request = httpx.Request("GET", "https://crm.example/api/accounts?q=ACME")
    response = httpx.Response(401, request=request, json={"error": "token expired"})
    try:
        response.raise_for_status()
    except httpx.HTTPStatusError as exc:
        return exc
    raise AssertionError("a 401 raises")


def agent(live_server: Any, secret: str) -> AgentClient:
    return AgentClient(live_server.url, secret, strict=True, timeout=10)


def escalated(client: AgentClient) -> tuple[int, dict[str, Any]]:
    """An agent's run: reported running, finished with an auth failure, decided on: escalate."""
    run = client.start("crm-agent", "crm_api", "lookup", attempted={"query": "ACME"})
    assert run["status"] == "running"
    finished = client.finish(run["id"], auth_error(), source="crm_api")
    assert (finished["status"], finished["failure_type"]) == ("failed", "auth_failure")
    decision = client.decide(run["id"])
    assert decision["action"] == "escalate" and decision["run"] == run["id"]
    return run["id"], decision


def wait_until(check: Any, timeout: float, what: str, worker: PoolWorker | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(
        f"timed out after {timeout} s waiting for {what}\n{worker.tail() if worker else ''}"
    )


# ---------------------------------------------------------------------------------------------


def test_an_agent_waits_while_an_operator_resolves_in_a_browser(
    page,  # noqa: F811
    live_server,
    celery_worker,
    operator,
):
    _, secret = ApiToken.issue("crm-agent")
    client = agent(live_server, secret)
    run_id, decision = escalated(client)
    review = client.review(decision["review"]["id"])
    assert decision["review"]["url"] == f"{live_server.url}/review/{review.id}/"
    assert client.decide(run_id) == decision  # asked again: the stored decision, once

    got: dict[str, Any] = {}

    def wait() -> None:
        got["resolution"] = review.wait(timeout=60)

    waiter = threading.Thread(target=wait)
    waiter.start()
    from playwright.sync_api import expect

    login(page, "olga", "operator-pass-123", then=decision["review"]["url"])
    card = page.locator(f"#card-{review.id}")
    card.locator("button", has_text="Claim").click()
    # The form is there before the claim too: wait for the claim's answer to replace the card.
    expect(card).to_contain_text("Claimed: it is yours")
    card.locator('input[name="resolution"][value="retry_edited"]').check()
    card.locator('textarea[name="note"]').fill("rotated the CRM key; retry with the new one")
    card.locator('textarea[name="edited_input"]').fill(json.dumps(EDITED))
    assert waiter.is_alive()  # the agent is waiting on its review when the operator resolves it
    card.locator("button", has_text="Resolve").click()
    page.wait_for_selector(f"#card-{review.id}.state-resolved")
    waiter.join(60)

    resolution = got["resolution"]
    assert resolution["action"] == "retry_edited" and resolution["input"] == EDITED
    assert resolution["resolved_by"] == "olga" and "rotated" in resolution["note"]
    assert [r.id for r in client.resolutions()] == [review.id]
    review.ack()
    assert review.data["delivered_at"] is not None
    assert list(client.resolutions()) == []  # never listed as undelivered again
    review.ack()
    assert list(client.resolutions()) == []

    page.goto(f"/runs/{run_id}/")
    decision_card = page.locator("section.card", has_text="Decision").first.inner_text().lower()
    assert "escalate" in decision_card
    assert "asked for by the agent's own coordinator" in decision_card
    text = page.locator("main").inner_text()
    assert f"Review #{review.id}" in text and "Picked up by the agent" in text
    page.watcher.assert_clean()


def test_a_webhook_answered_500_once_is_delivered_signed_and_acked_once(
    live_server, celery_worker, operator
):
    token, secret = ApiToken.issue("crm-agent")
    with receiving(500) as receiver:
        signing = token.set_callback(receiver.url)
        client = agent(live_server, secret)
        _, decision = escalated(client)
        item = ReviewItem.objects.get(pk=decision["review"]["id"])
        do_resolve_review(
            item,
            operator,
            "retry_edited",
            channel=Channel.DASHBOARD,
            note="new key",
            edited_input=EDITED,
        )
        hook = wait_until(
            lambda: WebhookDelivery.objects.filter(item=item, state="delivered").first(),
            30,
            "the webhook delivered",
            celery_worker,
        )
        assert len(receiver.requests) == 2
        assert set(receiver.delivery_ids()) == {str(hook.delivery_id)}
        for _, headers, body in receiver.requests:
            assert verify_signature(signing, headers["Failsight-Signature"], body)
        payload = json.loads(receiver.requests[-1][2])
        assert payload["id"] == item.pk and payload["resolution"]["input"] == EDITED
    attempts = WebhookAttempt.objects.filter(delivery=hook).order_by("number")
    assert [(a.status_code, a.acked) for a in attempts] == [(500, False), (200, True)]
    item.refresh_from_db()
    assert item.delivered_via == "webhook" and list(client.resolutions()) == []


def test_exactly_once_under_concurrent_waits_a_killed_worker_and_a_slow_receiver(
    live_server, celery_worker, operator
):
    # 20 agents' threads wait on one item and acknowledge it as soon as it is resolved.
    _, secret = ApiToken.issue("crm-agent")
    client = agent(live_server, secret)
    _, decision = escalated(client)
    item_id = decision["review"]["id"]

    def wait_and_ack(_: int) -> tuple[Any, Any]:
        handle = agent(live_server, secret).review(item_id)
        resolution = handle.wait(timeout=60)
        return resolution, handle.ack()["delivered_at"]

    with ThreadPoolExecutor(20) as pool:
        futures = [pool.submit(wait_and_ack, i) for i in range(20)]
        time.sleep(1)  # the waits are in the server by now
        do_resolve_review(
            ReviewItem.objects.get(pk=item_id),
            operator,
            "abort",
            channel=Channel.DASHBOARD,
            note="stop for good",
        )
        results = [f.result(timeout=90) for f in futures]
    assert len({json.dumps(r, sort_keys=True) for r, _ in results}) == 1
    assert results[0][0]["action"] == "abort"
    assert len({delivered for _, delivered in results}) == 1  # one pick-up, the first ack's
    assert AuditEntry.objects.filter(action="review.resolve", object_id=str(item_id)).count() == 1

    # A worker child killed in the middle of a delivery, and a receiver slower than the
    # attempt's timeout, while another agent's delivery goes through at once.
    killed_token, killed_secret = ApiToken.issue("killed-agent")
    slow_token, slow_secret = ApiToken.issue("slow-agent")
    fast_token, fast_secret = ApiToken.issue("fast-agent")
    with (
        receiving(("slow", 8, 200)) as killed,
        receiving(("slow", 8, 200)) as slow,
        receiving() as fast,
    ):
        killed_token.set_callback(killed.url)
        slow_token.set_callback(slow.url)
        fast_token.set_callback(fast.url)
        items = {}
        for name, secret_ in (("killed", killed_secret), ("slow", slow_secret)):
            _, answer = escalated(agent(live_server, secret_))
            items[name] = ReviewItem.objects.get(pk=answer["review"]["id"])
        _, answer = escalated(agent(live_server, fast_secret))
        items["fast"] = ReviewItem.objects.get(pk=answer["review"]["id"])

        do_resolve_review(items["slow"], operator, "abort", channel=Channel.DASHBOARD, note="x")
        assert slow.arrived.wait(20), celery_worker.tail()
        do_resolve_review(items["fast"], operator, "abort", channel=Channel.DASHBOARD, note="x")
        fast_done = wait_until(
            lambda: WebhookDelivery.objects.filter(item=items["fast"], state="delivered").first(),
            20,
            "the fast receiver's delivery",
            celery_worker,
        )
        slow_first = WebhookAttempt.objects.get(delivery__item=items["slow"], number=1)
        # The fast delivery went through while the slow receiver still held its first attempt
        # (which ends only at its timeout): one slow receiver holds one pool process, no more.
        fast_attempt = WebhookAttempt.objects.get(delivery=fast_done, acked=True)
        assert slow_first.finished_at is None or fast_attempt.finished_at < slow_first.finished_at
        # Then, with the pool steady again, a child killed in the middle of a delivery.
        do_resolve_review(items["killed"], operator, "abort", channel=Channel.DASHBOARD, note="x")
        assert killed.arrived.wait(20), celery_worker.tail()
        holder = WebhookDelivery.objects.get(item=items["killed"]).lease_owner
        os.kill(int(holder.rpartition(":")[2]), signal.SIGKILL)  # the child mid-request

        for name in ("killed", "slow"):
            wait_until(
                lambda n=name: WebhookDelivery.objects.filter(
                    item=items[n], state="delivered"
                ).exists(),
                60,
                f"the {name} receiver's delivery",
                celery_worker,
            )
        for receiver in (killed, slow):
            ids = receiver.delivery_ids()
            assert len(ids) >= 2 and len(set(ids)) == 1  # redelivered, the same id to dedupe
    cut = WebhookAttempt.objects.get(delivery__item=items["killed"], number=1)
    assert cut.finished_at is None and not cut.acked  # its worker died mid-request
    for name in ("killed", "slow", "fast"):
        hook = WebhookDelivery.objects.get(item=items[name])
        assert WebhookAttempt.objects.filter(delivery=hook, acked=True).count() == 1, name
        items[name].refresh_from_db()
        assert items[name].delivered_via == "webhook", name
    assert Run.objects.filter(status=Run.Status.RUNNING).count() == 0
