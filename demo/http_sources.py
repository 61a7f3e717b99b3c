"""The demonstration's sources: subagents that call the fault-injecting provider over HTTP and
raise whatever httpx raises; nothing here interprets a failure.

A workflow's `input.faults` may script the provider for a (source, topic), `{"NAME:TOPIC":
"http:429:2"}` or one behaviour per attempt; it travels as the `X-Demo-Fault` header.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import httpx

CAPABILITIES = {
    "news": ["news_api", "news_wire", "news_archive"],
    "web": ["web_search", "web_archive"],
    "scholar": ["scholar_api", "scholar_mirror"],
    "internal": ["internal_db"],
}
NOT_REFRESHABLE = {"internal_db"}
MAX_PAGES = 10
USER_AGENT = "subagent/1"  # the provider counts its answers per caller

_state = threading.local()
_keys: dict[str, str] = {}
_keys_lock = threading.Lock()


def provider_url() -> str:
    return os.environ.get("FAILSIGHT_PROVIDER_URL", "http://127.0.0.1:8765").rstrip("/")


def timeout() -> float:
    return float(os.environ.get("FAILSIGHT_PROVIDER_TIMEOUT", "2.0"))


def register(registry: Any) -> None:
    for capability, names in CAPABILITIES.items():
        for name in names:
            refresher = None if name in NOT_REFRESHABLE else _refresher(name)
            registry.register(capability, name, _source(name), refresher=refresher)


def _client() -> httpx.Client:
    """Return one pooled client per thread and process (a client must not cross a fork)."""
    client = getattr(_state, "client", None)
    if client is None or _state.pid != os.getpid():
        client = httpx.Client(
            base_url=provider_url(), timeout=timeout(), headers={"User-Agent": USER_AGENT}
        )
        _state.client, _state.pid = client, os.getpid()
    return client


def _key(name: str) -> str:
    with _keys_lock:
        key = _keys.get(name)
    return key or _fetch_key(name)


def _fetch_key(name: str) -> str:
    response = _client().post("/v1/keys", json={"source": name})
    response.raise_for_status()
    key = response.json()["api_key"]
    with _keys_lock:
        _keys[name] = key
    return key


def _refresher(name: str):
    def refresh() -> None:
        # Forget the key: the next call fetches one, so a provider that cannot issue it fails
        # that call (classified, routed) rather than the worker's task around it.
        with _keys_lock:
            _keys.pop(name, None)

    refresh.__name__ = f"refresh_{name}_key"
    return refresh


def planned_fault(name: str, query: dict[str, Any]) -> str:
    """Return the scripted behaviour for this source, topic and attempt, or "" for the mix."""
    plan = (query.get("faults") or {}).get(f"{name}:{query.get('topic', '')}")
    if isinstance(plan, list) and plan:
        attempt = max(1, int(query.get("attempt") or 1))
        return str(plan[min(attempt, len(plan)) - 1])
    return plan if isinstance(plan, str) else ""


def _source(name: str):
    def call(query: dict[str, Any], partial: list[dict]) -> list[dict]:
        headers = {"Authorization": f"Bearer {_key(name)}"}
        if fault := planned_fault(name, query):
            headers["X-Demo-Fault"] = fault
        results: list[dict] = []
        page: int | None = 1
        while page and page <= MAX_PAGES:
            params = {"q": query.get("query", ""), "page": page}
            response = _client().get(f"/v1/{name}/search", params=params, headers=headers)
            response.raise_for_status()
            body = response.json()
            items = list(body["results"])
            partial.extend(items)
            results.extend(items)
            page = body.get("next_page")
        return results

    call.__name__ = f"search_{name}"
    return call
