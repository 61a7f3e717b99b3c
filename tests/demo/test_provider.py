"""The fault-injecting provider and the sources that call it, over real HTTP on 127.0.0.1.

Each test starts `demo.provider` in a thread on a free port and calls it through `demo.http_sources`
(httpx), so every failure is the exception httpx really raises, read by the real classifier.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from classifier import classify
from demo import http_sources as sources
from demo import provider as provider_mod


@pytest.fixture
def provider(monkeypatch, tmp_path) -> Iterator[provider_mod.Provider]:
    server, state = provider_mod.serve(
        seed=5, mix="ok:3=1", key_ttl=60, log=str(tmp_path / "requests.jsonl")
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    host, port = server.server_address[:2]
    monkeypatch.setenv("FAILSIGHT_PROVIDER_URL", f"http://{host}:{port}")
    monkeypatch.setenv("FAILSIGHT_PROVIDER_TIMEOUT", "0.5")
    sources._keys.clear()
    sources._state.__dict__.clear()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        sources._keys.clear()
        sources._state.__dict__.clear()


def call(name: str, plan: str | list[str] | None = None, topic: str = "film", attempt: int = 1):
    """Call a demo source as the coordinator does; return (results or exception, partial)."""
    query = {"query": f"AI impact: {topic}", "topic": topic, "attempt": attempt}
    if plan is not None:
        query["faults"] = {f"{name}:{topic}": plan}
    partial: list[dict] = []
    try:
        return sources._source(name)(query, partial), partial
    except Exception as exc:
        return exc, partial


def test_results_come_in_pages_and_empty_is_a_success(provider):
    results, partial = call("news_api", "ok:5")
    assert [r["url"].rsplit("/", 1)[1] for r in results] == ["1", "2", "3", "4", "5"]
    assert partial == results
    assert call("news_api", "empty", topic="music")[0] == []
    assert provider.stats()["status:200"] == 3  # two pages, then one empty page


@pytest.mark.parametrize(
    ("plan", "exc_type", "category", "status"),
    [
        ("http:429:3", httpx.HTTPStatusError, "rate_limited", 429),
        ("http:404", httpx.HTTPStatusError, "resource_missing", 404),
        ("http:422", httpx.HTTPStatusError, "invalid_input", 422),
        ("http:403", httpx.HTTPStatusError, "auth_failure", 403),
        ("http:500", httpx.HTTPStatusError, "server_fault", 500),
        ("http:503:4", httpx.HTTPStatusError, "server_fault", 503),
        ("http:529", httpx.HTTPStatusError, "server_fault", 529),
        ("drop", httpx.RemoteProtocolError, "transient", None),
        ("slow:1.5", httpx.ReadTimeout, "timeout", None),
        ("garbled", ValueError, "unclassified", None),
    ],
)
def test_each_fault_is_the_real_client_exception(provider, plan, exc_type, category, status):
    exc, _ = call("web_search", plan)
    assert isinstance(exc, exc_type), repr(exc)
    failure = classify(exc)
    assert failure.category.value == category
    assert failure.status_code == status


def test_retry_after_travels_in_the_header(provider):
    exc, _ = call("news_api", "http:429:3")
    assert exc.response.headers["Retry-After"] == "3"
    assert classify(exc).retry_after == 3.0
    assert classify(call("news_api", "http:503:4", topic="music")[0]).retry_after == 4.0


def test_a_partial_page_keeps_what_the_first_page_gave(provider):
    exc, partial = call("scholar_api", "partial:2:http:503")
    assert isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code == 503
    assert len(partial) == 2


def test_an_expired_key_is_a_real_401_until_the_refresher_fetches_a_new_one(provider):
    exc, _ = call("news_api", "expire")
    assert classify(exc).category.value == "auth_failure"
    again, _ = call("news_api", "ok:2", topic="music")
    assert isinstance(again, httpx.HTTPStatusError) and again.response.status_code == 401
    sources._refresher("news_api")()
    assert len(call("news_api", "ok:2", topic="music")[0]) == 2


def test_keys_expire_by_themselves(provider):
    provider.key_ttl = 1.0  # long enough for the first call to use its key on a loaded machine
    assert call("news_wire", "ok:1")[0]
    time.sleep(1.1)
    exc, _ = call("news_wire", "ok:1", topic="music")
    assert isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code == 401


def test_the_internal_database_has_no_refresher():
    registered = {}

    class Registry:
        def register(self, capability, name, fn, refresher=None):
            registered[name] = (capability, refresher)

    sources.register(Registry())
    assert registered["internal_db"] == ("internal", None)
    assert all(r is not None for n, (_, r) in registered.items() if n != "internal_db")


def test_a_plan_gives_one_behaviour_per_attempt(provider):
    assert isinstance(call("news_api", ["drop", "ok:2"], attempt=1)[0], httpx.TransportError)
    assert len(call("news_api", ["drop", "ok:2"], attempt=2)[0]) == 2
    assert len(call("news_api", ["drop", "ok:2"], attempt=7)[0]) == 2


def test_repeating_a_query_before_its_retry_after_is_counted(provider):
    call("news_api", "http:429:30")
    assert provider.stats().get("early_repeats", 0) == 0
    call("news_api", "ok:1")
    assert provider.stats()["early_repeats"] == 1


def test_a_slow_answer_finishing_after_a_retry_after_is_not_an_early_repeat(provider, tmp_path):
    """Each request is judged at its arrival: the summary's "repeats before Retry-After" and
    the overview's early-retry tile count the same thing (and agree on zero)."""
    plan = ["slow:1:ok:1", "http:429:30", "ok:1"]
    slow = threading.Thread(target=call, args=("news_api", plan), kwargs={"attempt": 1})
    slow.start()
    deadline = time.monotonic() + 5
    while not provider.asked and time.monotonic() < deadline:  # the slow request is in
        time.sleep(0.01)
    assert isinstance(call("news_api", plan, attempt=2)[0], httpx.HTTPStatusError)  # the 429
    slow.join()
    while provider.stats().get("status:200", 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)  # the slow request is answered now, after the Retry-After was given
    assert provider.stats()["status:200"] == 1
    assert provider.stats().get("early_repeats", 0) == 0
    lines = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    first, limited = lines[1], lines[0]  # logged in the order they were answered
    assert first["status"] == 200 and limited["status"] == 429
    assert first["t"] < limited["t"] < first["answered"]  # arrived first, answered last
    call("news_api", plan, attempt=3)  # a genuine repeat before the 30 s have passed
    assert provider.stats()["early_repeats"] == 1


def test_the_mix_is_seeded_and_permanent_faults_stick():
    mix = provider_mod.parse_mix(provider_mod.DEFAULT_MIX)
    one = provider_mod.Provider(seed=3, mix=mix, key_ttl=60)
    two = provider_mod.Provider(seed=3, mix=mix, key_ttl=60)
    other = provider_mod.Provider(seed=4, mix=mix, key_ttl=60)
    asks = [(s, f"q{i}", 1) for i in range(60) for s in ("news_api", "web_search")]
    first = [one.behaviour(*a, planned="") for a in asks]
    assert first == [two.behaviour(*a, planned="") for a in asks]
    assert first != [other.behaviour(*a, planned="") for a in asks]
    assert len(set(first)) > 5  # a mix, not one behaviour
    sticky = provider_mod.Provider(seed=1, mix=[("http:404", 1)], key_ttl=60)
    assert sticky.behaviour("news_api", "q", 1, "") == "http:404"
    sticky.mix, sticky.total = [("ok:3", 1)], 1
    assert sticky.behaviour("news_api", "q", 1, "") == "http:404"  # still missing
    assert sticky.behaviour("news_api", "other", 1, "") == "ok:3"


@pytest.mark.parametrize("spec", ["", "ok", "ok=x", "=3", "ok:3=0"])
def test_a_bad_mix_is_refused_with_the_entry(spec):
    with pytest.raises(ValueError, match="mix"):
        provider_mod.parse_mix(spec)


def test_unknown_routes_and_bad_key_requests_answer_json(provider):
    base = sources.provider_url()
    assert httpx.get(f"{base}/v1/nowhere/search").json()["error"]["type"] == "not_found_error"
    assert httpx.post(f"{base}/v1/keys", json={"source": "x"}).status_code == 422
    assert httpx.get(f"{base}/v1/news_api/search?q=a").status_code == 401  # no key at all


def test_answers_are_counted_and_logged_per_caller(provider, tmp_path):
    call("news_api", "http:503:2")
    call("news_api", "garbled", topic="music")
    base = sources.provider_url()
    key = httpx.post(f"{base}/v1/keys", json={"source": "internal_db"}).json()["api_key"]
    headers = {"Authorization": f"Bearer {key}", "User-Agent": "crm-agent/1"}
    httpx.get(f"{base}/v1/internal_db/search?q=acme", headers=headers)
    stats = provider.stats()
    assert stats["caller:subagent:http:503"] == 1 and stats["caller:subagent:garbled"] == 1
    assert stats["caller:crm-agent:ok"] == 1
    lines = [json.loads(x) for x in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [line["caller"] for line in lines] == ["subagent", "subagent", "crm-agent"]


def test_the_mix_can_be_changed_while_it_serves(provider):
    base = sources.provider_url()
    assert httpx.put(f"{base}/v1/mix", json={"mix": "http:500=1"}).status_code == 200
    exc, _ = call("web_search", topic="games")
    assert exc.response.status_code == 500
    refused = httpx.put(f"{base}/v1/mix", json={"mix": "ok=x"})
    assert refused.status_code == 422 and "mix" in refused.json()["error"]["message"]
    assert call("web_search", topic="games")[0].response.status_code == 500  # unchanged


def test_a_refresher_never_raises_and_the_next_call_carries_the_failure(monkeypatch):
    monkeypatch.setenv("FAILSIGHT_PROVIDER_URL", "http://127.0.0.1:9")  # nothing listens there
    sources._keys["news_api"] = "old-key"
    sources._state.__dict__.clear()
    sources._refresher("news_api")()  # in the worker's task, outside the classified call
    exc, _ = call("news_api", "ok:2")
    assert isinstance(exc, httpx.ConnectError)  # inside the call: classified and routed
    assert classify(exc).category.value == "transient"
    sources._state.__dict__.clear()
