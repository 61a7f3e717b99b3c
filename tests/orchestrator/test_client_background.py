"""AgentClient reporting in the background (its default): batches from a queue, a spool while a
real server process is down and its re-send on the next start, a flush at interpreter exit, and
no reporting failure ever raised into the agent's code. All against real servers: the live
server, or the web server started and stopped by the test; no mock."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from orchestrator.client import AgentClient, ClientError
from orchestrator.models import ApiToken, Run
from tests.conftest import require_service
from tests.orchestrator.test_worker import database_url, wait_for

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed once the block ends: connections are refused


def keys() -> set[str]:
    return set(Run.objects.values_list("idempotency_key", flat=True))


@pytest.fixture
def secret(db) -> str:
    return ApiToken.issue("background-agent")[1]


@pytest.fixture
def spool(tmp_path) -> Path:
    return tmp_path / "cache" / "spool.jsonl"


def test_track_queues_and_a_thread_sends_batches_of_at_most_100(live_server, secret, spool):
    sizes: list[int] = []
    with AgentClient(live_server.url, secret, spool_path=spool) as client:
        client.http.event_hooks["request"] = [
            lambda r: (
                sizes.append(len(json.loads(r.content)["runs"]))
                if r.url.path.endswith("/runs/batch")
                else None
            )
        ]
        calls = []
        for i in range(250):
            with client.track("bulk-agent", "news_api", "search", {"i": i}) as call:
                call.results = [i]
            calls.append(call)
        assert all(call.run is None and call.key for call in calls)  # nothing waited on HTTP
        assert client.flush(30)
        assert sum(sizes) == 250 and max(sizes) <= 100 and len(sizes) >= 3
        assert keys() == {call.key for call in calls}
        stats = client.stats
        assert (stats.queued, stats.created, stats.lost, stats.spooled) == (250, 250, 0, 0)
    assert not spool.exists()


def test_a_lone_run_is_sent_without_a_flush(live_server, secret, spool):
    with AgentClient(live_server.url, secret, spool_path=spool, flush_interval=0.5) as client:
        with client.track("lone-agent", "web_search") as call:
            call.results = []
        # No flush, no close: the reporting thread sends it once the interval has passed.
        wait_for(lambda: call.key in keys(), 15, "the run to be sent")


def test_a_failure_is_classified_and_reported_in_the_background(live_server, secret, spool):
    request = httpx.Request("GET", "https://news.example/search")
    with AgentClient(live_server.url, secret, spool_path=spool) as client:
        with pytest.raises(httpx.ReadTimeout), client.track("news-agent", "news_api") as call:
            call.partial_results.append({"url": "https://a"})
            raise httpx.ReadTimeout("timed out", request=request)
        assert call.envelope["failure_type"] == "timeout"  # for the agent's own coordinator
        assert client.flush(15)
    run = Run.objects.get(idempotency_key=call.key)
    assert (run.status, run.failure_type, run.partial_count) == ("failed", "timeout", 1)
    assert run.finished_at is not None  # the time it happened, not the time it was sent


def test_the_reporting_thread_fetches_the_overrides_the_agent_classifies_with(
    live_server, secret, spool
):
    request = httpx.Request("GET", "https://maps.example/v1/query")
    response = httpx.Response(498, json={"error": "token"}, request=request)
    expired = httpx.HTTPStatusError("HTTP 498", request=request, response=response)
    fetched: list[str] = []
    with AgentClient(live_server.url, secret, spool_path=spool) as client:
        client.http.event_hooks["request"] = [
            lambda r: fetched.append(r.url.path) if r.url.path.endswith("/policies") else None
        ]
        assert client.flush(15)  # the thread has started: it fetched the overrides first
        with client.track("maps-agent", "esri", reraise=False) as call:
            raise expired
        assert call.envelope["failure_type"] == "auth_failure"  # the seeded 498 override
        assert client.flush(15)
    assert Run.objects.get(idempotency_key=call.key).failure_type == "auth_failure"
    assert client.policy_version is not None and len(fetched) <= 1


def test_reporting_failures_are_logged_and_counted_never_raised(live_server, spool, caplog, db):
    with AgentClient(live_server.url, "fs_not_a_token", spool_path=spool) as client:
        with client.track("agent", "web_search") as call:
            call.results = [1]
        with client.track("agent", "news_api", reraise=False):
            raise ConnectionResetError("peer reset")
        # The agent's own exception is still the agent's.
        with pytest.raises(KeyError), client.track("agent", "scholar_api"):
            raise KeyError("missing")
        assert client.flush(15)
        stats = client.stats
        assert (stats.lost, stats.created) == (3, 0)
        assert "auth_failure" in stats.last_error
    assert not Run.objects.exists()
    assert any("the server refused 3 runs" in r.getMessage() for r in caplog.records)
    assert not spool.exists()  # a refusal that a retry cannot fix is not kept for later


def test_a_run_json_cannot_carry_is_lost_alone(live_server, secret, spool, caplog):
    with AgentClient(live_server.url, secret, spool_path=spool) as client:
        with client.track("agent", "web_search", topic=object()) as bad:  # not JSON
            bad.results = [1]
        with client.track("agent", "web_search", duration_hint=float("nan")) as nan:
            nan.results = [1]
        with client.track("agent", "web_search") as good:
            good.results = [1]
        assert client.flush(15)
        assert (client.stats.lost, client.stats.created) == (2, 1)
    assert keys() == {good.key}
    assert any("is not JSON" in r.getMessage() for r in caplog.records)


def test_a_full_queue_loses_runs_counted_without_blocking_the_agent(spool, db):
    # A server that accepts connections and never answers: the reporting thread waits on it
    # while the agent goes on queueing.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        client = AgentClient(url, "fs_x", spool_path=spool, queue_size=2, timeout=2)
        for _ in range(8):
            with client.track("agent", "web_search") as call:
                call.results = [1]
        # A call that waited for room in the queue would have lost nothing.
        assert client.stats.lost >= 4
        client.reporter.flush_timeout = 0.1
        client.close()


def test_close_wakes_a_thread_waiting_to_fill_a_batch_and_spools_it(spool, db):
    # The thread holds one run and would wait a minute for more (flush_interval); close() must
    # not wait that out (its join would give up and the run die with the daemon thread).
    client = AgentClient(
        f"http://127.0.0.1:{free_port()}", "fs_x", spool_path=spool, flush_interval=60
    )
    with client.track("agent", "web_search") as call:
        call.results = [1]
    wait_for(lambda: client.reporter.queue.empty(), 10, "the thread to take the run")
    time.sleep(0.3)  # past the thread's idle wait: it now waits on flush_interval
    client.close()
    # Spooled by the thread itself: had close() not woken it, its join would have given up
    # with the run still held in the thread.
    assert [json.loads(line)["idempotency_key"] for line in spool.read_text().splitlines()] == [
        call.key
    ]


def test_strict_mode_reports_synchronously_and_raises_a_failed_report(live_server, secret, db):
    with AgentClient(live_server.url, secret, strict=True) as client:
        with client.track("agent", "web_search") as call:
            call.results = [1]
        assert Run.objects.get(pk=call.run["id"]).idempotency_key == call.key
        assert client.reporter is None and client.stats.queued == 0
    with AgentClient(live_server.url, "fs_not_a_token", strict=True) as client:
        with pytest.raises(ClientError) as err, client.track("agent", "web_search") as call:
            call.results = [1]
        assert err.value.failure.category.value == "auth_failure"


def test_the_client_imports_no_django_and_nothing_of_the_server(tmp_path):
    script = (
        "import sys, orchestrator.client\n"
        "ours = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'django', 'dashboard', 'demo', 'config', 'ninja', 'psycopg', 'celery'} "
        "or (m.startswith('orchestrator.') and m.split('.')[:2] != ['orchestrator', 'client']))\n"
        "print(ours)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# ---------------------------------------------------------------------------------------------
# Real processes: a server that goes away and comes back, an agent process that exits


class Server:
    """The web server as shipped serving the app on a fixed port and the test database;
    stopped and started."""

    def __init__(self, port: int, var: Path) -> None:
        self.port = port
        self.var = var
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = os.environ | {
            "DATABASE_URL": database_url(),
            "FAILSIGHT_VAR_DIR": str(self.var),
            "API_RATE_LIMIT_PER_MINUTE": "0",
            "DEBUG": "1",
            "BIND": f"127.0.0.1:{self.port}",
            "WEB_CONCURRENCY": "1",
        }
        log = (self.var / "web.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "config.serve"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(self._answers, 60, "the web server to answer")

    def _answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            pytest.fail((self.var / "web.log").read_text()[-3000:])
        try:
            return httpx.get(f"{self.url}/api/v1/policies", timeout=2).status_code == 401
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.proc is None:
            return
        os.killpg(self.proc.pid, 15)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(5)
        self.proc = None


@pytest.fixture
def server(postgres, tmp_path) -> Iterator[Server]:
    require_service(database_url().startswith("postgres"), "PostgreSQL")
    var = tmp_path / "var"
    var.mkdir()
    server = Server(free_port(), var)
    try:
        yield server
    finally:
        server.stop()


def track_some(client: AgentClient, count: int) -> set[str]:
    tracked = set()
    for i in range(count):
        with client.track("spool-agent", "news_api", reraise=False, attempted={"i": i}) as call:
            if i % 2:
                raise TimeoutError("read timed out")
            call.results = [i]
        tracked.add(call.key)
    return tracked


@pytest.mark.slow
def test_runs_wait_in_the_spool_while_the_server_is_down_and_are_sent_on_the_next_start(
    server, secret, spool
):
    # The server is down: the runs go to the spool, nothing is raised.
    with AgentClient(server.url, secret, spool_path=spool, max_attempts=2) as client:
        sent = track_some(client, 5)
        assert client.flush(30)
        assert (client.stats.spooled, client.stats.lost) == (5, 0)
    lines = spool.read_text().splitlines()
    assert {json.loads(line)["idempotency_key"] for line in lines} == sent

    # The next start, with the server up: the spool is sent first, then removed.
    server.start()
    with AgentClient(server.url, secret, spool_path=spool) as client:
        assert client.flush(30)
        assert (client.stats.resent, client.stats.created) == (5, 5)
    assert keys() == sent and not spool.exists()
    failed = Run.objects.filter(idempotency_key__in=sent, status="failed")
    assert set(failed.values_list("failure_type", flat=True)) == {"timeout"}

    # A crash between the answer and the spool's removal sends it again: stored once.
    spool.write_text("\n".join(lines) + "\n")
    with AgentClient(server.url, secret, spool_path=spool) as client:
        assert client.flush(30)
        assert (client.stats.resent, client.stats.existing, client.stats.created) == (5, 5, 0)
    assert Run.objects.count() == 5


@pytest.mark.slow
def test_a_server_that_goes_away_and_comes_back_gets_the_spooled_runs(server, secret, spool):
    server.start()
    with AgentClient(server.url, secret, spool_path=spool, max_attempts=2) as client:
        first = track_some(client, 2)
        assert client.flush(30) and keys() == first
        server.stop()
        later = track_some(client, 3)
        assert client.flush(30)
        assert client.stats.spooled == 3 and len(spool.read_text().splitlines()) == 3
        server.start()
        # No new run to send: the reporting thread probes the server by itself and re-sends.
        wait_for(lambda: keys() == first | later, 60, "the spooled runs to be re-sent")
        wait_for(lambda: not spool.exists(), 10, "the spool to be emptied")
        assert client.stats.lost == 0


AGENT_SCRIPT = textwrap.dedent(
    """
    import sys
    from orchestrator.client import AgentClient

    url, token, spool = sys.argv[1:4]
    client = AgentClient(url, token, spool_path=spool, flush_interval=60, max_attempts=1)
    for i in range(7):
        with client.track("exiting-agent", "news_api", attempted={"i": i}) as call:
            call.results = [i]
        print(call.key, flush=True)
    # no flush, no close: the interpreter's exit sends what is queued
    """
)


def run_agent(url: str, token: str, spool: Path) -> set[str]:
    out = subprocess.run(
        [str(VENV_PYTHON), "-c", AGENT_SCRIPT, url, token, str(spool)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return set(out.stdout.split())


@pytest.mark.slow
def test_an_agent_process_that_exits_flushes_its_queue(live_server, secret, spool):
    sent = run_agent(live_server.url, secret, spool)
    assert len(sent) == 7 and keys() == sent and not spool.exists()


@pytest.mark.slow
def test_an_agent_process_that_exits_while_the_server_is_down_spools_its_queue(secret, spool):
    sent = run_agent(f"http://127.0.0.1:{free_port()}", secret, spool)
    spooled = {json.loads(line)["idempotency_key"] for line in spool.read_text().splitlines()}
    assert len(sent) == 7 and spooled == sent
