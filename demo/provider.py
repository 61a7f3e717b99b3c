"""A fault-injecting data provider over HTTP, playing several sources the way real ones fail.

    python -m demo.provider [--host 127.0.0.1] [--port 0] [--seed 1] [--mix SPEC] [--key-ttl 90]
                            [--log PATH]

Its first line on stdout is `listening on http://HOST:PORT` (port 0 picks a free one). It serves
POST /v1/keys, GET /v1/NAME/search?q=TEXT&page=N (Bearer KEY), GET /v1/stats, GET /healthz, and
PUT /v1/mix {"mix": SPEC}, which changes the fault mix from then on (a storm, then a calm).

Each search answers with a *behaviour*, named in `X-Demo-Fault` or drawn from the seeded fault mix
(a hash of the call, so the same seed and calls give the same faults whatever the timing):

    ok[:N]              N results (pages of 3)          empty            a valid empty result
    slow:S[:THEN]       answer after S seconds          drop             close without answering
    garbled             200 with a body that is no JSON expire           revoke the key, then 401
    http:CODE[:RA]      that status with the provider's error body (429/503 with Retry-After: RA)
    partial:K:THEN      page 1 has K results and a next page; page 2 does THEN

403, 404 and 422 stick to their (source, query). The mix is `behaviour=weight,...` (`--mix`, or
FAILSIGHT_PROVIDER_MIX). A request arriving before an earlier Retry-After for its query has passed
counts as an `early_repeat` (a well-behaved coordinator keeps it at zero). Every answer is also
counted per caller, named by its User-Agent's product (`crm-agent/1` is `crm-agent`), as
`caller:NAME:BEHAVIOUR` (the behaviour's kind, with its status for `http`), and logged with it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import secrets
import signal
import socket
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

SOURCES = {
    "web_search": "web",
    "web_archive": "web",
    "news_api": "news",
    "news_wire": "news",
    "news_archive": "news",
    "scholar_api": "scholar",
    "scholar_mirror": "scholar",
    "internal_db": "internal",
}
# A service credential: never expires.
SERVICE_KEYS = {"internal_db"}
PAGE_SIZE = 3
MODEL = "demo-reader-small"  # the model every answer reports its usage for (demo/prices.py)
# The faults only a person can settle (a garbled body nobody can classify, a 403 no refresh
# cures) are rare, as in a healthy deployment, while every other fault keeps the coordinator busy.
# A 403 sticks to its (source, query), so the same queries meet it again as the stream goes on.
DEFAULT_MIX = (
    "ok:3=136,ok:5=32,empty=32,slow:4=16,drop=16,garbled=2,http:429:2=20,http:429:3=8,"
    "http:500=12,http:503=12,http:503:2=4,http:529=8,http:404=20,http:422=8,http:403=1,"
    "partial:2:drop=12,partial:3:http:503=8"
)
STICKY = {"403", "404", "422"}
NO_ROUTE = {"error": {"type": "not_found_error", "message": "No route"}}

ERROR_BODIES: dict[int, dict[str, Any]] = {
    401: {"error": {"type": "authentication_error", "message": "API key expired or unknown"}},
    403: {"error": {"type": "permission_error", "message": "This key may not read that table"}},
    404: {"error": {"type": "not_found_error", "message": "No index covers this query"}},
    422: {"error": {"type": "invalid_request_error", "message": "q: wildcards are not supported"}},
    429: {"error": {"type": "rate_limit_error", "message": "Rate limit reached for requests"}},
    500: {"error": {"type": "api_error", "message": "Internal server error"}},
    503: {"error": {"type": "service_unavailable", "message": "Backend is restarting"}},
    529: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
}


def parse_mix(spec: str) -> list[tuple[str, int]]:
    mix = []
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        behaviour, sep, weight = entry.rpartition("=")
        if not sep or not behaviour or not weight.isdigit():
            raise ValueError(f"bad fault mix entry {entry!r}: expected behaviour=weight")
        mix.append((behaviour, int(weight)))
    if not mix or sum(w for _, w in mix) <= 0:
        raise ValueError("the fault mix needs at least one entry with a positive weight")
    return mix


def behaviour_kind(behaviour: str) -> str:
    """Return what a behaviour is, without its timings: `http:503:2` is `http:503`, `slow:4` is
    `slow`."""
    kind, _, rest = behaviour.partition(":")
    return f"{kind}:{rest.partition(':')[0]}" if kind == "http" else kind


class Provider:
    def __init__(self, seed: int, mix: list[tuple[str, int]], key_ttl: float, log: str = ""):
        self.seed = seed
        self.mix = mix
        self.total = sum(w for _, w in mix)
        self.key_ttl = key_ttl
        self.keys: dict[str, tuple[str, float | None]] = {}
        self.asked: Counter[tuple[str, str, int]] = Counter()
        self.sticky: dict[tuple[str, str], str] = {}
        self.pending: dict[tuple[str, str], str] = {}
        self.deadlines: dict[tuple[str, str], float] = {}
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.log = open(log, "a", encoding="utf-8") if log else None  # noqa: SIM115

    def issue_key(self, source: str) -> tuple[str, float | None]:
        key = secrets.token_hex(12)
        ttl = None if source in SERVICE_KEYS else self.key_ttl
        with self.lock:
            self.keys[key] = (source, None if ttl is None else time.monotonic() + ttl)
            self.counts["keys_issued"] += 1
        return key, ttl

    def key_ok(self, key: str, source: str) -> bool:
        with self.lock:
            owner, expires = self.keys.get(key, ("", 0.0))
        return owner == source and (expires is None or time.monotonic() < expires)

    def revoke(self, key: str) -> None:
        with self.lock:
            self.keys.pop(key, None)

    def behaviour(self, source: str, query: str, page: int, planned: str) -> str:
        with self.lock:
            n = self.asked[(source, query, page)]
            self.asked[(source, query, page)] += 1
            if planned:
                kind, _, rest = planned.partition(":")
                if kind == "partial" and page > 1:
                    return rest.partition(":")[2] or "drop"
                return planned
            if page > 1 and (source, query) in self.pending:
                return self.pending.pop((source, query))
            if page == 1 and (source, query) in self.sticky:
                return self.sticky[(source, query)]
            drawn = self._draw(f"{self.seed}|{source}|{query}|{page}|{n}")
            kind, _, rest = drawn.partition(":")
            if kind == "http" and rest.partition(":")[0] in STICKY and page == 1:
                self.sticky[(source, query)] = drawn
            if kind == "partial":
                self.pending[(source, query)] = rest.partition(":")[2] or "drop"
            return drawn

    def set_mix(self, mix: list[tuple[str, int]]) -> None:
        with self.lock:
            self.mix, self.total = mix, sum(w for _, w in mix)

    def _draw(self, key: str) -> str:
        point = int(hashlib.sha256(key.encode()).hexdigest()[:12], 16) % self.total
        for behaviour, weight in self.mix:
            if point < weight:
                return behaviour
            point -= weight
        return self.mix[-1][0]  # pragma: no cover - the weights sum to total

    def arrive(self, source: str, query: str) -> float:
        """Note a request's arrival, judged against the Retry-After given so far."""
        now = time.time()
        with self.lock:
            self.counts["requests"] += 1
            self.counts[f"source:{source}"] += 1
            deadline = self.deadlines.get((source, query))
            if deadline is not None and now < deadline:
                self.counts["early_repeats"] += 1
        return now

    def record(
        self,
        source: str,
        query: str,
        page: int,
        fault: str,
        status: int,
        ra: str,
        arrived: float,
        caller: str = "",
    ) -> None:
        """Note a request's answer: a Retry-After counts from the moment it is given."""
        now = time.time()
        with self.lock:
            self.counts[f"status:{status or 'dropped'}"] += 1
            self.counts[f"fault:{fault.split(':')[0]}"] += 1
            self.counts[f"caller:{caller or 'unknown'}:{behaviour_kind(fault)}"] += 1
            if ra:
                self.deadlines[(source, query)] = now + float(ra)
            if self.log:
                line = {"t": arrived, "source": source, "q": query, "page": page, "fault": fault}
                line |= {"status": status, "retry_after": float(ra) if ra else None}
                line["caller"] = caller
                line["answered"] = now
                self.log.write(json.dumps(line) + "\n")
                self.log.flush()

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return dict(sorted(self.counts.items()))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real providers; every answer has a length
    server_version = "FailsightDemoProvider/1"
    provider: Provider

    def log_message(self, format: str, *args: Any) -> None:
        """Requests go to the JSON log, not stderr."""

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        parts = url.path.strip("/").split("/")
        if url.path == "/healthz":
            return self.send_json(200, {"ok": True})
        if url.path == "/v1/stats":
            return self.send_json(200, self.provider.stats())
        if len(parts) == 3 and parts[0] == "v1" and parts[2] == "search" and parts[1] in SOURCES:
            return self.search(parts[1], parse_qs(url.query))
        return self.send_json(404, NO_ROUTE)

    def read_json(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            return json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            return None

    def do_PUT(self) -> None:
        body = self.read_json()
        if self.path != "/v1/mix":
            return self.send_json(404, NO_ROUTE)
        spec = body.get("mix") if isinstance(body, dict) else None
        try:
            self.provider.set_mix(parse_mix(spec if isinstance(spec, str) else ""))
        except ValueError as exc:
            error = {"type": "invalid_request_error", "message": str(exc)}
            return self.send_json(422, {"error": error})
        return self.send_json(200, {"mix": spec})

    def do_POST(self) -> None:
        body = self.read_json()
        if self.path != "/v1/keys":
            return self.send_json(404, NO_ROUTE)
        source = body.get("source") if isinstance(body, dict) else None
        if source not in SOURCES:
            return self.send_json(422, {"error": {"type": "invalid_request_error"}})
        key, ttl = self.provider.issue_key(source)
        self.send_json(201, {"api_key": key, "expires_in": ttl})

    def search(self, source: str, params: dict[str, list[str]]) -> None:
        query = (params.get("q") or [""])[0]
        raw_page = (params.get("page") or ["1"])[0]
        page = max(1, int(raw_page)) if raw_page.isdigit() else 1
        self.arrived = self.provider.arrive(source, query)
        key = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
        if not self.provider.key_ok(key, source):
            self.record(source, query, page, "expired_key", 401, "")
            return self.send_error_status(401)
        fault = self.provider.behaviour(source, query, page, self.headers.get("X-Demo-Fault", ""))
        self.answer(source, query, page, fault, key, fault)

    def record(self, source: str, query: str, page: int, fault: str, status: int, ra: str) -> None:
        caller = (self.headers.get("User-Agent") or "").partition("/")[0].strip()
        self.provider.record(source, query, page, fault, status, ra, self.arrived, caller)

    def answer(self, source: str, query: str, page: int, fault: str, key: str, logged: str) -> None:
        kind, _, rest = fault.partition(":")
        if kind == "slow":
            seconds, _, then = rest.partition(":")
            time.sleep(float(seconds or 3))
            return self.answer(source, query, page, then or "ok:3", key, logged)
        if kind == "drop":
            self.record(source, query, page, logged, 0, "")
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        if kind == "garbled":
            self.record(source, query, page, logged, 200, "")
            page_html = b"<html><body><h1>Scheduled maintenance</h1></body></html>"
            return self.send_raw(200, page_html, "application/json")
        if kind == "expire":
            self.provider.revoke(key)
            self.record(source, query, page, logged, 401, "")
            return self.send_error_status(401)
        if kind == "http":
            code, _, ra = rest.partition(":")
            status = int(code)
            if status == 429 and not ra:
                ra = "2"
            self.record(source, query, page, logged, status, ra)
            return self.send_error_status(status, ra)
        if kind == "partial":
            count = int(rest.partition(":")[0] or 2)
            self.record(source, query, page, logged, 200, "")
            return self.send_json(200, self.page_body(source, query, page, count, page + 1))
        total = 0 if kind == "empty" else int(rest or 3) if kind == "ok" else 3
        start = (page - 1) * PAGE_SIZE
        count = max(0, min(PAGE_SIZE, total - start))
        nxt = page + 1 if start + count < total else None
        self.record(source, query, page, logged, 200, "")
        return self.send_json(200, self.page_body(source, query, page, count, nxt, start))

    def page_body(
        self, source: str, query: str, page: int, count: int, nxt: int | None, start: int = 0
    ) -> dict[str, Any]:
        slug = hashlib.sha1(query.encode()).hexdigest()[:8]
        topic = query.rpartition(":")[2].strip() or query
        results = [
            {
                "url": f"https://{source.replace('_', '-')}.example/{slug}/{start + i + 1}",
                "title": f"{topic.title()}: finding {start + i + 1} from {source}",
                "excerpt": f"What {source} knows about {topic} (item {start + i + 1}).",
            }
            for i in range(count)
        ]
        # What reading the page took the provider's model, as an LLM API reports it.
        usage = {"model": MODEL, "input_tokens": 120 + 4 * len(query), "output_tokens": 45 * count}
        return {
            "source": source,
            "page": page,
            "results": results,
            "next_page": nxt,
            "usage": usage,
        }

    def send_error_status(self, status: int, retry_after: str = "") -> None:
        headers = {}
        if retry_after:
            headers["Retry-After"] = retry_after
        if status == 429:
            headers["X-RateLimit-Remaining"] = "0"
        if status == 401:
            headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
        body = ERROR_BODIES.get(status, {"error": {"type": "api_error"}})
        self.send_json(status, body, headers)

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        self.send_raw(status, json.dumps(body).encode(), "application/json", headers)

    def send_raw(
        self, status: int, data: bytes, ctype: str, headers: dict[str, str] | None = None
    ) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-answer is expected here; nothing to print."""


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    seed: int = 1,
    mix: str = DEFAULT_MIX,
    key_ttl: float = 90.0,
    log: str = "",
) -> tuple[Server, Provider]:
    """Bind the provider; return the server and its state."""
    provider = Provider(seed, parse_mix(mix), key_ttl, log)
    handler = type("BoundHandler", (Handler,), {"provider": provider})
    return Server((host, port), handler), provider


def main(argv: list[str] | None = None) -> int:
    env = os.environ.get
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default=env("FAILSIGHT_PROVIDER_HOST", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(env("FAILSIGHT_PROVIDER_PORT", "0")))
    parser.add_argument("--seed", type=int, default=int(env("FAILSIGHT_PROVIDER_SEED", "1")))
    parser.add_argument("--mix", default=env("FAILSIGHT_PROVIDER_MIX", DEFAULT_MIX))
    parser.add_argument(
        "--key-ttl", type=float, default=float(env("FAILSIGHT_PROVIDER_KEY_TTL", "90"))
    )
    parser.add_argument("--log", default=env("FAILSIGHT_PROVIDER_LOG", ""))
    args = parser.parse_args(argv)
    try:
        server, _ = serve(args.host, args.port, args.seed, args.mix, args.key_ttl, args.log)
    except ValueError as exc:
        parser.error(str(exc))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    host, port = server.server_address[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
