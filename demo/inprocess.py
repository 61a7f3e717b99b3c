"""A seeded, fault-injecting provider without a network: demonstration sources for news, web and
scholar, raising httpx exceptions built on real responses. A workflow's `faults` plan, keyed
"source:topic", names one of: ok[:n], empty, timeout, connect, server_fault[:status],
rate_limited:seconds, auth, auth_refreshable, missing, invalid, weird, partial:k:behaviour,
sleep:seconds[:behaviour]; `"*": "random"` draws from a seeded mix.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from typing import Any

import httpx

CAPABILITIES = {
    "news": ["news_api", "news_wire", "news_archive"],
    "web": ["web_search", "web_archive"],
    "scholar": ["scholar_api", "scholar_mirror"],
}
# The seeded mix for `"*": "random"`: a third permanent, two thirds transient, some empty.
RANDOM_MIX = [
    ("ok:3", 30),
    ("empty", 8),
    ("timeout", 10),
    ("server_fault", 10),
    ("rate_limited:1", 8),
    ("partial:2:timeout", 6),
    ("auth", 9),
    ("missing", 10),
    ("invalid", 5),
    ("weird", 4),
]
_refreshed: set[str] = set()
_lock = threading.Lock()


class ToolGlitch(Exception):
    """An error from a tool that carries no status, code or telling type: stays unclassified."""


def register(registry: Any) -> None:
    for capability, names in CAPABILITIES.items():
        for name in names:
            refresher = _refresher(name) if name == "news_api" else None
            registry.register(capability, name, _source(name), refresher=refresher)


def _refresher(name: str):
    def refresh() -> None:
        with _lock:
            _refreshed.add(name)

    return refresh


def _take_refresh(name: str) -> bool:
    """Whether `name`'s credentials were refreshed since its last auth failure; spends the refresh
    (a refresh serves the one call after it, whatever that call meets)."""
    with _lock:
        refreshed = name in _refreshed
        _refreshed.discard(name)
    return refreshed


def _source(name: str):
    def call(query: dict[str, Any], partial: list[dict]) -> list[dict]:
        behaviour = behaviour_for(name, query)
        _log_call(name, query, behaviour)
        return perform(name, query, behaviour, partial)

    call.__name__ = f"demo_{name}"
    return call


def behaviour_for(name: str, query: dict[str, Any]) -> str:
    """Return what this call does: the plan's entry for this attempt, a seeded draw, or ok."""
    faults = query.get("faults") or {}
    topic = query.get("topic", "")
    attempt = int(query.get("attempt") or 1)
    plan = faults.get(f"{name}:{topic}")
    if isinstance(plan, list) and plan:
        return str(plan[min(attempt, len(plan)) - 1])
    if isinstance(plan, str):
        return plan
    if faults.get("*") == "random":
        return _draw(f"{faults.get('seed', 0)}:{name}:{topic}:{attempt}")
    return "ok:3"


def _draw(key: str) -> str:
    point = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % sum(w for _, w in RANDOM_MIX)
    for behaviour, weight in RANDOM_MIX:
        if point < weight:
            return behaviour
        point -= weight
    return "ok:3"


def perform(name: str, query: dict[str, Any], behaviour: str, partial: list[dict]) -> list[dict]:
    kind, _, arg = behaviour.partition(":")
    topic = query.get("topic", "")
    url = f"https://{name.replace('_', '-')}.example/v1/search?q={topic}"
    if kind == "ok":
        return _results(name, topic, int(arg or 3))
    if kind == "empty":
        return []
    if kind == "sleep":
        seconds, _, then = arg.partition(":")
        time.sleep(float(seconds))
        return perform(name, query, then or "ok:3", partial)
    if kind == "partial":
        count, _, then = arg.partition(":")
        partial.extend(_results(name, topic, int(count)))
        return perform(name, query, then or "timeout", partial)
    if kind == "auth_refreshable":
        if _take_refresh(name):
            return _results(name, topic, 3)
        kind = "auth"
    elif kind == "auth":
        _take_refresh(name)  # a key no refresh cures: the refresh is spent on this call too
    raise _exception(kind, arg, url)


def _exception(kind: str, arg: str, url: str) -> Exception:
    request = httpx.Request("GET", url)
    if kind == "timeout":
        return httpx.ReadTimeout("The read operation timed out", request=request)
    if kind == "connect":
        return httpx.ConnectError("[Errno 111] Connection refused", request=request)
    if kind == "rate_limited":
        headers = {"Retry-After": arg or "2", "Content-Type": "application/json"}
        body = {"error": {"type": "rate_limit_exceeded", "message": "Too many requests"}}
        return _status_error(request, 429, headers, body)
    if kind == "server_fault":
        return _status_error(request, int(arg or 503), {}, {"error": "upstream unavailable"})
    if kind == "auth":
        headers = {"WWW-Authenticate": 'Bearer error="invalid_token", error_description="expired"'}
        return _status_error(request, 401, headers, {"error": "The API key has expired"})
    if kind == "missing":
        return _status_error(request, 404, {}, {"error": "No such collection"})
    if kind == "invalid":
        return _status_error(request, 400, {}, {"error": "query: must not contain wildcards"})
    return ToolGlitch("tool returned a payload in a shape nobody expected (flux capacitor)")


def _status_error(
    request: httpx.Request, status: int, headers: dict[str, str], body: Any
) -> httpx.HTTPStatusError:
    response = httpx.Response(status, headers=headers, json=body, request=request)
    try:
        response.raise_for_status()
    except httpx.HTTPStatusError as exc:  # the message and attributes httpx itself produces
        return exc
    raise AssertionError(f"status {status} did not raise")  # pragma: no cover


def _results(name: str, topic: str, count: int) -> list[dict]:
    return [
        {
            "url": f"https://{name.replace('_', '-')}.example/{topic}/{i}",
            "title": f"{topic.title()} and AI, item {i} from {name}",
            "excerpt": f"How AI changes {topic}: finding {i}.",
        }
        for i in range(1, count + 1)
    ]


def _log_call(name: str, query: dict[str, Any], behaviour: str) -> None:
    """Append the call to FAILSIGHT_DEMO_CALL_LOG, so tests can check when providers were called."""
    path = os.environ.get("FAILSIGHT_DEMO_CALL_LOG")
    if not path:
        return
    line = {
        "source": name,
        "topic": query.get("topic", ""),
        "attempt": query.get("attempt"),
        "run": query.get("run"),
        "delivery": query.get("delivery"),
        "behaviour": behaviour,
        "pid": os.getpid(),
        "t": time.time(),
    }
    # A log that cannot be written is the test's problem, never a failure of the call.
    with _lock, contextlib.suppress(OSError), open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")
