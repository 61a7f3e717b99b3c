"""AgentClient against the real app served by a live server (no mock), in strict mode: each call
answers synchronously, as these tests read. Background reporting: test_client_background.py."""

from __future__ import annotations

import socket

import httpx
import pytest

from classifier import classify
from orchestrator.client import AgentClient, ClientError
from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import ApiToken, ProviderOverride, Run

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


@pytest.fixture
def agent(live_server):
    _, secret = ApiToken.issue("client-test")
    sleeps: list[float] = []
    with AgentClient(live_server.url, secret, sleep=sleeps.append, strict=True) as client:
        client.sleeps = sleeps
        yield client


def test_track_reports_a_success_with_its_results(agent):
    with agent.track("news-agent", "news_api", "search", {"q": "film"}) as call:
        call.results = [{"url": "https://a"}, {"url": "https://b"}]
    run = Run.objects.get(pk=call.run["id"])
    assert (run.status, run.result_count, run.attempted["q"]) == ("succeeded", 2, "film")


def test_track_classifies_a_failure_and_keeps_partial_results(agent):
    request = httpx.Request("GET", "https://news.example/search")
    with pytest.raises(httpx.ReadTimeout), agent.track("news-agent", "news_api", "search") as call:
        call.partial_results.append({"url": "https://a"})
        raise httpx.ReadTimeout("timed out", request=request)
    run = Run.objects.get(pk=call.run["id"])
    assert (run.status, run.failure_type, run.partial_count) == ("failed", "timeout", 1)


def test_the_decorator_reports_valid_empty_as_success(agent):
    @agent.tracked("web-agent", "web_search", "search")
    def search(query: str) -> list:
        return []

    assert search("nothing") == []
    run = Run.objects.get(source="web_search")
    assert run.status == "succeeded" and run.result_count == 0


def test_a_report_with_the_same_key_is_stored_once(agent):
    envelope = {"status": "ok", "results": [1]}
    first = agent.report(envelope, agent="a", source="s", idempotency_key="k-1")
    again = agent.report(envelope, agent="a", source="s", idempotency_key="k-1")
    assert first["id"] == again["id"] and Run.objects.count() == 1


def test_it_asks_for_a_decision_and_a_classification(agent):
    decision = agent.decide(failure={"failure_type": "invalid_input"}, source="news_api")
    assert decision["action"] == "abort"
    assert agent.classify({"status_code": 404})["failure_type"] == "resource_missing"


def test_a_401_is_not_retried(live_server):
    sent: list[str] = []
    client = AgentClient(live_server.url, "fs_wrong", sleep=lambda s: None, strict=True)
    client.http.event_hooks["request"] = [lambda r: sent.append(r.url.path)]
    with pytest.raises(ClientError) as err:
        client.classify({"status_code": 500})
    assert err.value.failure.category.value == "auth_failure" and len(sent) == 1


def test_a_422_is_not_retried(agent):
    sent: list[str] = []
    agent.http.event_hooks["request"] = [lambda r: sent.append(r.url.path)]
    with pytest.raises(ClientError) as err:
        agent.decide(failure={}, attempt=0, source="")
    assert err.value.failure.category.value == "invalid_input" and len(sent) == 1


def test_a_refused_connection_is_retried_with_backoff(db):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: connections are refused
    sleeps: list[float] = []
    client = AgentClient(
        f"http://127.0.0.1:{port}", "fs_x", sleep=sleeps.append, max_attempts=3, strict=True
    )
    with pytest.raises(ClientError) as err:
        client.classify({})
    assert err.value.failure.category.value == "transient" and len(sleeps) == 2


def test_a_200_whose_body_is_not_json_is_a_client_error(db):
    """A proxy in front of Failsight answering its own HTML page with a 200: a real server."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Html(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b"<html>maintenance</html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = AgentClient(f"http://127.0.0.1:{server.server_port}", "fs_x", strict=True)
        with pytest.raises(ClientError) as err:
            client.classify({"status_code": 500})
    finally:
        server.shutdown()
    assert "JSONDecodeError" in err.value.failure.exception_type
    assert err.value.body == "<html>maintenance</html>"


def _status_error(status: int) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "https://maps.example/v1/query")
    response = httpx.Response(status, json={"error": "token"}, request=request)
    return httpx.HTTPStatusError(f"HTTP {status}", request=request, response=response)


@pytest.mark.slow
def test_an_embedded_agent_classifies_with_the_servers_overrides(agent, policy_editor):
    fetched: list[str] = []
    agent.http.event_hooks["request"] = [
        lambda r: fetched.append(r.url.path) if r.url.path.endswith("/policies") else None
    ]
    # Without the server's overrides a 498 is just another 4xx.
    assert classify(_status_error(498)).category.value == "invalid_input"
    for _ in range(2):
        with pytest.raises(httpx.HTTPStatusError), agent.track("maps-agent", "esri") as call:
            raise _status_error(498)
        run = Run.objects.get(pk=call.run["id"])
        assert (run.failure_type, run.retryable) == ("auth_failure", False)  # the seeded override
    assert len(fetched) == 1  # once per version, not once per classification

    # An operator edits the overrides: the next answer names a new version, and the next
    # classification fetches the policies again before classifying.
    override = ProviderOverride(
        match_on="status_code", match_value="499", failure_type="rate_limited", retryable=True
    )
    version = save_policy_change(override, policy_editor)
    assert agent.policies()["version"] == version
    with pytest.raises(httpx.HTTPStatusError), agent.track("maps-agent", "esri") as call:
        raise _status_error(499)
    assert Run.objects.get(pk=call.run["id"]).failure_type == "rate_limited"
    assert agent.policy_version == str(version) and len(fetched) == 3


def test_an_unreachable_server_leaves_classification_on_the_default_rules(db):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = AgentClient(f"http://127.0.0.1:{port}", "fs_x", sleep=lambda s: None, strict=True)
    assert client.report_classifier().classify(_status_error(404)).category.value == (
        "resource_missing"
    )
    assert client.policy_version is None
