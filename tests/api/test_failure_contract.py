"""One failure contract end to end: our own envelopes round-trip through POST /runs, envelopes in
other conventions are read under our names, failure types from other vocabularies are stored
canonically (and refused alike everywhere when unknown), /decisions honours what a failure
says about retrying, and every reported failure reaches its source's breaker and Retry-After
hold, which every caller then honours (a call inside it is early, whatever its query)."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest
import time_machine
from django.utils import timezone

from classifier.envelope import error_envelope, success_envelope
from dashboard.tiles import overview_tiles
from insights.stats import WINDOWS
from orchestrator.coordination import workflow
from orchestrator.models import Run, SourceHealth, Workflow
from tests.api.helpers import assert_envelope, error_paths, post_json
from tests.dashboard.conftest import signed_in

ATTEMPTED = {"operation": "web_search", "query": "AI impact on film production 2024"}
PARTIAL = [{"url": "https://a.test/1", "excerpt": "…"}, {"url": "https://a.test/2"}]
ALTERNATIVES = ["retry with a narrower query", "use news_api instead of web crawl"]
VALID = [
    "transient",
    "rate_limited",
    "auth_failure",
    "resource_missing",
    "invalid_input",
    "timeout",
    "server_fault",
    "unclassified",
]


class ToolGlitch(Exception):
    """An error with no status, code or telling name: stays unclassified."""


def status_error(status: int, headers: dict[str, str] | None = None) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "https://search.test/v1?q=film")
    response = httpx.Response(status, headers=headers or {}, json={"error": "x"}, request=request)
    return httpx.HTTPStatusError(f"HTTP {status}", request=request, response=response)


def chained() -> Exception:
    """A tool error wrapping the reset connection that caused it (raised, so __cause__ is set)."""
    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError as reset:
            raise RuntimeError("search tool failed") from reset
    except RuntimeError as exc:
        return exc


# (exception, the category the classifier must give it), one per category and a chain.
EXCEPTIONS = [
    (ConnectionResetError(104, "Connection reset by peer"), "transient"),
    (status_error(429, {"Retry-After": "3"}), "rate_limited"),
    (status_error(401), "auth_failure"),
    (status_error(404), "resource_missing"),
    (status_error(422), "invalid_input"),
    (httpx.ReadTimeout("timed out", request=httpx.Request("GET", "https://x.test")), "timeout"),
    (status_error(503), "server_fault"),
    (status_error(501), "server_fault"),
    (ToolGlitch("a payload nobody expected"), "unclassified"),
    (chained(), "transient"),
]


def report(client, headers, body: dict[str, Any], **extra: str) -> Any:
    return post_json(client, "/runs", body, **headers, **extra)


def assert_round_trip(client, headers, envelope: dict[str, Any]) -> dict[str, Any]:
    """POST the envelope as it is and check GET gives back every key of it."""
    sent = envelope | {"agent": "researcher", "source": "web_search"}
    created = report(client, headers, sent)
    assert created.status_code == 201, created.content
    got = client.get(f"/api/v1/runs/{created.json()['id']}", **headers).json()
    for key, value in envelope.items():
        if key == "status":  # the envelope's word, stored as the run's status
            assert got["status"] == {"ok": "succeeded", "error": "failed"}[value]
        else:
            assert got[key] == value, key
    return got


@pytest.mark.parametrize(("exc", "category"), EXCEPTIONS, ids=lambda x: getattr(x, "__name__", ""))
def test_our_own_error_envelope_round_trips_through_the_api(client, auth_headers, exc, category):
    envelope = error_envelope(
        exc, attempted=ATTEMPTED, partial_results=PARTIAL, alternatives=ALTERNATIVES
    )
    assert envelope["failure_type"] == category
    got = assert_round_trip(client, auth_headers, envelope)
    assert got["reported_failure_type"] is None  # the canonical name was sent


def test_a_chained_exception_keeps_its_whole_chain(client, auth_headers):
    envelope = error_envelope(chained(), attempted=ATTEMPTED)
    got = assert_round_trip(client, auth_headers, envelope)
    assert got["chain"] == [
        "builtins.RuntimeError: search tool failed",
        "builtins.ConnectionResetError: [Errno 104] Connection reset by peer",
    ]
    assert got["signal"] == "type" and got["provider_code"] is None


@pytest.mark.parametrize("results", [[{"url": "https://a.test"}], []])
def test_our_own_success_envelope_round_trips_valid_empty_included(client, auth_headers, results):
    got = assert_round_trip(client, auth_headers, success_envelope(results, attempted=ATTEMPTED))
    assert got["valid_empty"] is (not results)


def test_the_envelope_from_another_vocabulary_is_stored_canonically_and_never_blindly_retried(
    client, auth_headers
):
    """An agent's envelope in another vocabulary, end to end: stored and routed canonically."""
    envelope = {
        "status": "error",
        "failure_type": "auth_error",
        "attemptedQuery": "AI impact on film production 2024",
        "partialResults": PARTIAL,
        "alternatives_suggested": ["news_api"],
        "retry_recommended": False,
        "detail": "401 Unauthorized: the API key has expired",
        "statusCode": 401,
    }
    created = report(client, auth_headers, envelope | {"agent": "scout", "source": "web_search"})
    assert created.status_code == 201, created.content
    run = client.get(f"/api/v1/runs/{created.json()['id']}", **auth_headers).json()
    assert run["failure_type"] == "auth_failure"
    assert run["reported_failure_type"] == "auth_error"
    assert run["attempted"] == {"query": "AI impact on film production 2024"}
    assert run["partial_results"] == PARTIAL and run["partial_count"] == 2
    assert run["alternatives"] == ["news_api"]
    assert (run["retryable"], run["status_code"]) == (False, 401)
    stored = Run.objects.get(pk=run["id"])
    assert (stored.failure_type, stored.reported_failure_type) == ("auth_failure", "auth_error")

    # Routed as an auth failure, by the built-in coordinator's rules and by /decisions alike:
    # no refresher for web_search, so a human decides; news_api has one, so one refresh.
    assert workflow.decide_for(None, stored).action == "escalate"
    for source, action, refresh in [("web_search", "escalate", False), ("news_api", "retry", True)]:
        ask = {"failure": envelope, "attempt": 1, "source": source}
        decision = post_json(client, "/decisions", ask, **auth_headers).json()
        assert (decision["action"], decision["refresh"]) == (action, refresh), decision
        assert decision["reason"].startswith(f"Credentials rejected by {source} (401)")
    asked = {"failure": run, "attempt": 1, "source": "web_search"}  # the run as GET returns it
    assert post_json(client, "/decisions", asked, **auth_headers).json()["action"] == "escalate"


# ---------------------------------------------------------------------------------------------
# Field names from other conventions


def test_every_envelope_field_is_read_in_camel_case(client, auth_headers):
    body = {
        "status": "error",
        "failureType": "timeout",
        "retryable": True,
        "retryAfter": 2.5,
        "attempted": ATTEMPTED,
        "partialResults": PARTIAL,
        "alternatives": ALTERNATIVES,
        "detail": "ReadTimeout",
        "results": [],
        "statusCode": 504,
        "providerCode": "GatewayTimeout",
        "exceptionType": "httpx.ReadTimeout",
        "signal": "type",
        "chain": ["httpx.ReadTimeout: timed out"],
        "taxonomyVersion": 1,
        "agent": "researcher",
        "source": "web_search",
        "retryOf": None,
        "durationMs": 12.5,
    }
    created = report(client, auth_headers, body)
    assert created.status_code == 201, created.content
    run = created.json()
    assert (run["failure_type"], run["retry_after"], run["status_code"]) == ("timeout", 2.5, 504)
    assert (run["provider_code"], run["exception_type"], run["signal"]) == (
        "GatewayTimeout",
        "httpx.ReadTimeout",
        "type",
    )
    assert run["partial_results"] == PARTIAL and run["duration_ms"] == 12.5


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"failure_type": "timeout", "alternative_suggested": ["x"]}, "alternative_suggested"),
        ({"failure_type": "timeout", "retryRecomended": False}, "retryRecomended"),
        ({"failuretype": "timeout"}, "failuretype"),
        ({"failure_type": "timeout", "retry_recommended": False, "retryable": True}, ""),
        ({"failure_type": "timeout", "attempted_query": "a", "attempted": {"query": "b"}}, ""),
        ({"failure_type": "timeout", "taxonomy_version": 2}, "taxonomy_version"),
        ({"failure_type": "timeout", "signal": "vibes"}, "signal"),
    ],
)
def test_unknown_and_contradictory_keys_are_refused_not_lost(client, auth_headers, body, path):
    sent = {"status": "error", "agent": "a", "source": "s", **body}
    refused = assert_envelope(report(client, auth_headers, sent), 422, "invalid_input")
    paths = error_paths(refused)
    if path:
        assert path in paths, refused
    else:  # the second of the two names is the one refused
        assert paths & {"retryable", "retry_recommended", "attempted_query"}, refused
    assert not Run.objects.exists()


# ---------------------------------------------------------------------------------------------
# One vocabulary on every endpoint

ALIASES = {
    "auth_error": "auth_failure",
    "forbidden": "auth_failure",
    "rate_limit": "rate_limited",
    "too_many_requests": "rate_limited",
    "permanent": "resource_missing",
    "not_found": "resource_missing",
    "schema": "invalid_input",
    "connection": "transient",
    "deadline_exceeded": "timeout",
    "overloaded": "server_fault",
    "unknown": "unclassified",
}


@pytest.mark.parametrize(("alias", "canonical"), ALIASES.items())
def test_an_alias_is_stored_canonically_by_runs_and_batch_items(
    client, auth_headers, alias, canonical
):
    body = {"status": "error", "failure_type": alias, "agent": "a", "source": "s"}
    one = report(client, auth_headers, body).json()
    assert (one["failure_type"], one["reported_failure_type"]) == (canonical, alias)
    batch = post_json(client, "/runs/batch", {"runs": [body]}, **auth_headers).json()
    stored = Run.objects.get(pk=batch["results"][0]["id"])
    assert (stored.failure_type, stored.reported_failure_type) == (canonical, alias)
    listed = client.get("/api/v1/runs", {"failure_type": alias}, **auth_headers).json()
    assert {r["id"] for r in listed["items"]} == {one["id"], stored.pk}


@pytest.mark.parametrize(("alias", "canonical"), ALIASES.items())
def test_an_alias_is_read_by_decisions_and_classify(client, auth_headers, alias, canonical):
    ask = {"failure": {"failure_type": alias}, "attempt": 1, "source": "web_search"}
    decided = post_json(client, "/decisions", ask, **auth_headers)
    assert decided.status_code == 200, decided.content
    described = post_json(client, "/classify", {"failure_type": alias}, **auth_headers).json()
    mcp = {"isError": True, "structuredContent": {"errorCategory": alias}}
    from_mcp = post_json(client, "/classify", mcp, **auth_headers).json()
    assert described["failure_type"] == from_mcp["failure_type"] == canonical


def _refusals(client, headers, name: str) -> list[tuple[Any, str]]:
    """(answer, path of the refused value) from every endpoint that reads a failure type."""
    run = {"status": "error", "failure_type": name, "agent": "a", "source": "s"}
    batch = post_json(client, "/runs/batch", {"runs": [run]}, **headers)
    item = batch.json()["results"][0]
    assert item["status"] == "rejected" and item["error"]["errors"][0]["path"] == (
        "runs.0.failure_type"
    )
    ask = {"failure": {"failure_type": name}, "attempt": 1, "source": "web_search"}
    mcp = {"isError": True, "structuredContent": {"errorCategory": name}}
    return [
        (report(client, headers, run), "failure_type"),
        (post_json(client, "/decisions", ask, **headers), "failure.failure_type"),
        (client.get("/api/v1/runs", {"failure_type": name}, **headers), "failure_type"),
        (post_json(client, "/classify", {"failure_type": name}, **headers), "failure_type"),
        (post_json(client, "/classify", mcp, **headers), "errorCategory"),
        (
            post_json(client, "/classify", {"error_category": name, "isError": True}, **headers),
            "error_category",
        ),
    ]


@pytest.mark.parametrize("name", ["cosmic_rays", "auth_err", "fatal"])
def test_an_unknown_failure_type_is_a_422_naming_the_valid_values_everywhere(
    client, auth_headers, name
):
    for answer, path in _refusals(client, auth_headers, name):
        body = assert_envelope(answer, 422, "invalid_input")
        error = next(e for e in body["errors"] if e["path"] == path)
        assert all(valid in error["message"] for valid in VALID), error
    assert not Run.objects.exists()


def test_decisions_no_longer_route_an_unknown_name_as_unclassified(client, auth_headers):
    ask = {"failure": {"failure_type": "cosmic_rays"}, "attempt": 1, "source": "news_api"}
    answer = post_json(client, "/decisions", ask, **auth_headers)
    assert answer.status_code == 422 and "retry" not in answer.json().get("action", "")
    missing = post_json(client, "/decisions", {"failure": {}, "source": "x"}, **auth_headers)
    assert "failure.failure_type" in error_paths(assert_envelope(missing, 422, "invalid_input"))
    mixed = {"failure": {"category": "timeout", "failure_type": "auth_failure"}, "source": "x"}
    conflict = assert_envelope(
        post_json(client, "/decisions", mixed, **auth_headers), 422, "invalid_input"
    )
    assert "failure.category" in error_paths(conflict)


# ---------------------------------------------------------------------------------------------
# /decisions: the retry signal, switch targets


def test_a_failure_saying_no_retry_is_not_retried_and_the_reason_says_who(client, auth_headers):
    by_agent = {"failure_type": "server_fault", "retryable": False, "status_code": 501}
    from_classify = post_json(client, "/classify", {"status_code": 501}, **auth_headers).json()
    assert from_classify["retryable"] is False
    for failure, who in [(by_agent, "the agent"), (from_classify, "the provider")]:
        ask = {"failure": failure, "attempt": 1, "source": "news_api"}
        decision = post_json(client, "/decisions", ask, **auth_headers).json()
        assert decision["action"] == "switch_source" and decision["switch_to"] == "news_wire"
        assert f"{who} says a retry cannot help" in decision["reason"], decision


def test_switch_to_is_named_whenever_the_decision_is_a_switch(client, auth_headers):
    failure = {"failure_type": "not_found", "alternatives_suggested": ["use scholar_api"]}
    ask = {"failure": failure, "attempt": 1, "source": "news_api"}
    first = post_json(client, "/decisions", ask, **auth_headers).json()
    assert (first["action"], first["switch_to"]) == ("switch_source", "news_wire")
    # Every news source tried: the suggested source of another capability is the target.
    late = ask | {"source": "news_archive", "tried": ["news_api", "news_wire"]}
    last = post_json(client, "/decisions", late, **auth_headers).json()
    assert (last["action"], last["switch_to"]) == ("switch_source", "scholar_api")
    assert "which the agent suggested" in last["reason"]
    gone = late | {"failure": {"failure_type": "not_found"}}
    nothing = post_json(client, "/decisions", gone, **auth_headers).json()
    assert (nothing["action"], nothing["switch_to"]) == ("accept_partial", None)


def test_backoff_reasons_read_well_through_the_api(client, auth_headers):
    ask = {"failure": {"failure_type": "timeout"}, "attempt": 1, "source": "web_search"}
    decision = post_json(client, "/decisions", ask, **auth_headers).json()
    assert decision["action"] == "retry" and "backoff with full jitter" in decision["reason"]


# ---------------------------------------------------------------------------------------------
# Smaller parts of the contract


def test_runs_filter_by_the_envelopes_words(client, auth_headers):
    ok = report(client, auth_headers, {"status": "ok", "agent": "a", "source": "s"}).json()
    bad = {"status": "error", "failure_type": "timeout", "agent": "a", "source": "s"}
    failed = report(client, auth_headers, bad).json()
    escalated = report(client, auth_headers, bad).json()
    Run.objects.filter(pk=escalated["id"]).update(status=Run.Status.ESCALATED)
    ids = {
        word: {
            r["id"]
            for r in client.get("/api/v1/runs", {"status": word}, **auth_headers).json()["items"]
        }
        for word in ("ok", "error", "failed")
    }
    assert ids == {
        "ok": {ok["id"]},
        "error": {failed["id"], escalated["id"]},
        "failed": {failed["id"]},
    }


def test_an_idempotent_replay_says_so(client, auth_headers):
    body = {"status": "ok", "agent": "a", "source": "s"}
    first = report(client, auth_headers, body, HTTP_IDEMPOTENCY_KEY="k-1")
    again = report(client, auth_headers, body, HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == again.status_code == 201
    assert "Idempotent-Replayed" not in first
    assert again["Idempotent-Replayed"] == "true"
    assert first.json() == again.json() and Run.objects.count() == 1


def test_futile_retries_are_a_named_set_of_the_runs_api(client, auth_headers, api_token):
    futile = Run.objects.create(
        token=api_token[0],
        agent="a",
        source="s",
        status=Run.Status.FAILED,
        failure_type="server_fault",
        retryable=False,
        decision="retry",
    )
    Run.objects.create(
        token=api_token[0],
        agent="a",
        source="s",
        status=Run.Status.FAILED,
        failure_type="auth_failure",
        retryable=False,
        decision="retry",
    )
    listed = client.get("/api/v1/runs", {"set": "futile_retries"}, **auth_headers).json()
    assert [r["id"] for r in listed["items"]] == [futile.pk]


# ---------------------------------------------------------------------------------------------
# Every reported failure feeds its source: breaker, budget, Retry-After hold; early calls


def health(source: str) -> SourceHealth:
    return SourceHealth.objects.get(source=source)


def answered(source: str, at: datetime, **fields: Any) -> dict[str, Any]:
    """A failed call of `source` answered at `at`: a 503 unless `fields` say otherwise."""
    run = {"status": "error", "failure_type": "server_fault", "status_code": 503, "agent": "a"}
    run |= {"source": source, "attempted": {"query": f"q-{uuid.uuid4().hex[:6]}"}}
    return run | {"finished_at": at.isoformat()} | fields


def ok(source: str, **fields: Any) -> dict[str, Any]:
    return {"status": "ok", "agent": "a", "source": source, "results": []} | fields


def test_every_report_path_feeds_its_sources_breaker_budget_and_hold(client, auth_headers):
    now = timezone.now()
    # One report, repeated under its key: counted once.
    for _ in range(2):
        report(client, auth_headers, answered("single", now), HTTP_IDEMPOTENCY_KEY="k-503")
    assert (health("single").consecutive_failures, health("single").breaker_state) == (1, "closed")
    # A batch: in the order the calls were answered, a success closes and refunds, the failures
    # after it count; five in a row open the breaker.
    times = [now - timedelta(seconds=s) for s in (5, 4, 3, 2, 1)]
    mixed = [answered("batch", t) for t in times]
    mixed[2] = ok("batch", finished_at=times[2].isoformat())
    SourceHealth.objects.create(source="batch", consecutive_failures=3, budget_tokens=100)
    post_json(client, "/runs/batch", {"runs": mixed[::-1]}, **auth_headers)
    assert (health("batch").consecutive_failures, health("batch").budget_tokens) == (2, 101)
    tripped = [answered("tripped", t) for t in times]
    post_json(client, "/runs/batch", {"runs": tripped}, **auth_headers)
    assert (health("tripped").breaker_state, health("tripped").consecutive_failures) == ("open", 5)
    # A finish of a run reported as running, with a Retry-After.
    started = report(client, auth_headers, {"status": "running", "agent": "a", "source": "patched"})
    finish = {"status": "error", "failure_type": "rate_limited", "retry_after": 20}
    path = f"/api/v1/runs/{started.json()['id']}"
    client.patch(path, json.dumps(finish), content_type="application/json", **auth_headers)
    held = health("patched")
    assert held.consecutive_failures == 1 and held.hold_from <= timezone.now()
    assert timedelta(seconds=19) < held.not_before - now <= timedelta(seconds=21)
    # A success closes the breaker again; a 404 says nothing about the provider's health.
    report(client, auth_headers, ok("tripped"))
    report(client, auth_headers, answered("tripped", now, failure_type="resource_missing"))
    assert (health("tripped").breaker_state, health("tripped").consecutive_failures) == (
        "closed",
        0,
    )


def test_an_otlp_span_feeds_its_source_too(client, auth_headers):
    from tests.orchestrator.test_one_route import SOURCE, State, otlp_action

    otlp_action(client, auth_headers, 503, 30, None, State())
    fed = health(SOURCE)
    assert fed.consecutive_failures == 1 and fed.not_before > timezone.now() + timedelta(seconds=25)


def test_a_decision_on_a_source_in_hold_is_wait_until_the_hold_ends_whatever_the_query(
    client, auth_headers
):
    now = timezone.now()
    report(
        client, auth_headers, answered("held_api", now, failure_type="rate_limited", retry_after=30)
    )
    other = report(client, auth_headers, answered("held_api", now))  # another query, no Retry-After
    decided = post_json(client, "/decisions", {"run": other.json()["id"]}, **auth_headers).json()
    assert decided["action"] == "wait" and 28 < decided["delay_seconds"] <= 30, decided
    assert "held_api holds every caller back" in decided["reason"]
    assert decided["budget_spent"] == 5
    ask = {"failure": {"failure_type": "transient"}, "attempt": 1, "source": "held_api"}
    assert post_json(client, "/decisions", ask, **auth_headers).json()["action"] == "wait"
    with time_machine.travel(now + timedelta(seconds=31)):
        after = post_json(client, "/decisions", ask, **auth_headers).json()
    assert after["action"] == "retry" and after["delay_seconds"] <= 1


def test_a_call_started_inside_a_hold_is_early_on_the_overview_whatever_its_query(
    client, auth_headers, operator
):
    t0 = timezone.now() - timedelta(seconds=20)
    limited = answered("early_api", t0, failure_type="rate_limited", retry_after=60)
    report(client, auth_headers, limited)
    inside = ok("early_api", started_at=(t0 + timedelta(seconds=5)).isoformat())
    early = report(client, auth_headers, inside).json()["id"]
    in_flight = ok("early_api", started_at=(t0 - timedelta(seconds=10)).isoformat())
    report(client, auth_headers, in_flight)  # started before the hold began: not early
    # Within one batch: a 429 and a later call of another query.
    t1 = timezone.now() - timedelta(seconds=5)
    pair = [
        answered("batch_api", t1, failure_type="rate_limited", retry_after=10),
        ok("batch_api", started_at=(t1 + timedelta(seconds=2)).isoformat()),
        ok("batch_api", started_at=(t1 + timedelta(seconds=12)).isoformat()),  # after it
    ]
    batch = post_json(client, "/runs/batch", {"runs": pair}, **auth_headers).json()
    expected = {early, batch["results"][1]["id"]}
    listed = client.get("/api/v1/runs", {"set": "early_retries"}, **auth_headers).json()
    assert {r["id"] for r in listed["items"]} == expected
    tile = next(t for t in overview_tiles(WINDOWS["1h"])["recovery"] if t.key == "early")
    assert tile.value == "2 early" and tile.tone == "bad"
    page = signed_in(operator).get(tile.href)  # the tile's own list
    assert {r.pk for r in page.context["runs"]} == expected


def held_back(source: str, due: datetime) -> Run:
    """A built-in coordinator's run its source's breaker held back: sent, queued again, due at
    its next look."""
    wf = Workflow.objects.create(name="w", topics=["t"], capability="news")
    fields = dict(workflow=wf, topic="t", agent="a", source=source, status="queued")
    return Run.objects.create(**fields, due_at=due, dispatched_at=timezone.now())


@pytest.mark.parametrize("path", ["single", "batch", "finish", "no-start"])
def test_an_agents_report_that_closes_a_breaker_wakes_the_runs_it_held_back(
    client, auth_headers, path
):
    """An open or half-open breaker that an agent's success closes starts the built-in
    coordinator's held-back runs now, whichever path the report took (with or without a call
    start, which decides whether the breakers are read with the holds); a failure, or a source
    whose breaker stays open, wakes nobody."""
    later = timezone.now() + timedelta(seconds=30)
    SourceHealth.objects.create(source="woken", breaker_state="half_open", opened_at=timezone.now())
    SourceHealth.objects.create(source="still", breaker_state="open", opened_at=timezone.now())
    woken, still = held_back("woken", later), held_back("still", later)
    started = (timezone.now() - timedelta(seconds=1)).isoformat()
    failed = answered("still", timezone.now(), started_at=started)
    success = ok("woken", started_at=started)
    if path == "single":
        report(client, auth_headers, failed)
        report(client, auth_headers, success)
    elif path == "batch":
        post_json(client, "/runs/batch", {"runs": [failed, success]}, **auth_headers)
    elif path == "no-start":
        report(client, auth_headers, failed | {"started_at": None})
        report(client, auth_headers, ok("woken"))
    else:
        running = {"status": "running", "agent": "a", "source": "woken"}
        pk = report(client, auth_headers, running).json()["id"]
        done = json.dumps({"status": "ok", "results": []})
        client.patch(f"/api/v1/runs/{pk}", done, content_type="application/json", **auth_headers)
    assert health("woken").breaker_state == "closed"
    assert Run.objects.get(pk=woken.pk).due_at <= timezone.now()
    assert health("still").breaker_state == "open"
    assert Run.objects.get(pk=still.pk).due_at == later
