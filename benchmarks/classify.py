"""How fast is classify, absolutely and compared with the failure path it sits on?

For each exception of a corpus built in-process from real library exception classes (no
network), this measures:

- classify: the cost of `classify(exc)` on an already raised exception;
- failure path: building the same exception, raising it from a function call and catching it;
- ratio: classify / failure path (the issue's target: median over the corpus <= 1.0);

and the throughput of a plain HTTP status error (target: >= 200,000 classifications/s).

    .venv/bin/python benchmarks/classify.py            # full size
    .venv/bin/python benchmarks/classify.py --quick    # a smoke run, well under a second or two
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from classifier import classify

Factory = Callable[[], BaseException]

PLAIN_HTTP_STATUS = "httpx HTTPStatusError 404 (plain HTTP status error)"
TARGET_RATE = 200_000
TARGET_RATIO = 1.0


class ToolError(Exception):
    """An agent's wrapper with no signal of its own."""


def _httpx_status(status: int, headers: dict[str, str] | None = None) -> Factory:
    import httpx

    def build() -> BaseException:
        request = httpx.Request("GET", "https://api.example.test/search")
        response = httpx.Response(status, headers=headers, request=request)
        return httpx.HTTPStatusError(f"status {status}", request=request, response=response)

    return build


def _requests_status(status: int, headers: dict[str, str]) -> Factory:
    import requests

    def build() -> BaseException:
        response = requests.Response()
        response.status_code = status
        response.headers.update(headers)
        return requests.HTTPError(f"{status} Client Error", response=response)

    return build


def _urllib_status(status: int) -> Factory:
    import email.message
    import urllib.error

    def build() -> BaseException:
        return urllib.error.HTTPError(
            "https://x.test", status, "Not Found", email.message.Message(), None
        )

    return build


def _aiohttp_status(status: int) -> Factory:
    import aiohttp
    from multidict import CIMultiDict, CIMultiDictProxy

    def build() -> BaseException:
        headers = CIMultiDictProxy(CIMultiDict({"Retry-After": "2"}))
        return aiohttp.ClientResponseError(None, (), status=status, message="x", headers=headers)  # type: ignore[arg-type]

    return build


def _botocore(code: str, status: int) -> Factory:
    from botocore.exceptions import ClientError

    def build() -> BaseException:
        response = {
            "Error": {"Code": code, "Message": "Rate exceeded"},
            "ResponseMetadata": {
                "HTTPStatusCode": status,
                "HTTPHeaders": {"x-amzn-requestid": "1"},
            },
        }
        return ClientError(response, "GetItem")  # type: ignore[arg-type]

    return build


def _openai_quota() -> Factory:
    import httpx
    import openai

    def build() -> BaseException:
        request = httpx.Request("POST", "https://api.openai.test/v1/chat/completions")
        response = httpx.Response(429, request=request)
        body = {"message": "quota", "type": "insufficient_quota", "code": "insufficient_quota"}
        return openai.RateLimitError("quota", response=response, body=body)

    return build


def _anthropic_overloaded() -> Factory:
    import anthropic
    import httpx

    def build() -> BaseException:
        request = httpx.Request("POST", "https://api.anthropic.test/v1/messages")
        response = httpx.Response(529, request=request)
        body = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        return anthropic.InternalServerError("Overloaded", response=response, body=body)

    return build


def _google(status: int) -> Factory:
    from google.api_core import exceptions

    return lambda: exceptions.from_http_status(status, "deadline")


def _httpx_read_timeout() -> Factory:
    import httpx

    request = httpx.Request("GET", "https://x.test")
    return lambda: httpx.ReadTimeout("read timed out", request=request)


def _requests_read_timeout() -> Factory:
    import requests

    return lambda: requests.exceptions.ReadTimeout("Read timed out. (read timeout=10)")


def _urllib3_refused() -> Factory:
    from urllib3.exceptions import NewConnectionError

    return lambda: NewConnectionError(None, "Failed to establish a new connection: refused")


def _redis_refused() -> Factory:
    import redis

    return lambda: redis.exceptions.ConnectionError("Error 111 connecting to 127.0.0.1:6390.")


def _psycopg_refused() -> Factory:
    import psycopg

    return lambda: psycopg.OperationalError("connection failed: Connection refused")


def _pydantic() -> Factory:
    import pydantic

    class Query(pydantic.BaseModel):
        limit: int

    def build() -> BaseException:
        try:
            Query.model_validate({"limit": "many"})
        except pydantic.ValidationError as exc:
            return exc
        raise AssertionError("validated")

    return build


def _jsonschema() -> Factory:
    import jsonschema

    return lambda: jsonschema.ValidationError("'query' is a required property")


def _wrapped_timeout() -> Factory:
    inner = _httpx_read_timeout()

    def build() -> BaseException:
        error = ToolError("search failed")
        error.__cause__ = inner()
        return error

    return build


def corpus() -> list[tuple[str, Factory]]:
    """Return the (name, factory) pairs whose libraries are installed."""
    entries: list[tuple[str, Callable[[], Factory]]] = [
        (PLAIN_HTTP_STATUS, lambda: _httpx_status(404)),
        (
            "httpx HTTPStatusError 503 + Retry-After",
            lambda: _httpx_status(503, {"Retry-After": "3"}),
        ),
        (
            "requests HTTPError 429 + Retry-After",
            lambda: _requests_status(429, {"Retry-After": "7"}),
        ),
        ("urllib HTTPError 404", lambda: _urllib_status(404)),
        ("aiohttp ClientResponseError 503", lambda: _aiohttp_status(503)),
        ("botocore ClientError ThrottlingException", lambda: _botocore("ThrottlingException", 400)),
        ("openai RateLimitError insufficient_quota", _openai_quota),
        ("anthropic 529 overloaded_error", _anthropic_overloaded),
        ("google-api-core DeadlineExceeded", lambda: _google(504)),
        ("httpx ReadTimeout", _httpx_read_timeout),
        ("requests ReadTimeout", _requests_read_timeout),
        ("urllib3 NewConnectionError", _urllib3_refused),
        ("redis ConnectionError", _redis_refused),
        ("psycopg OperationalError (message)", _psycopg_refused),
        ("pydantic ValidationError", _pydantic),
        ("jsonschema ValidationError", _jsonschema),
        ("ToolError from httpx ReadTimeout", _wrapped_timeout),
        ("builtins ConnectionResetError", lambda: lambda: ConnectionResetError(104, "reset")),
        ("builtins TimeoutError", lambda: lambda: TimeoutError("timed out")),
        ("builtins FileNotFoundError", lambda: lambda: FileNotFoundError(2, "No such file")),
        ("builtins RuntimeError (unclassified)", lambda: lambda: RuntimeError("boom")),
    ]
    found = []
    for name, make in entries:
        try:
            found.append((name, make()))
        except ImportError:
            print(f"skipped (library not installed): {name}", file=sys.stderr)
    return found


def per_call(run: Callable[[int], None], number: int, repeat: int) -> float:
    """Return the best CPU seconds per call of `run(number)` over `repeat` runs.

    CPU time of this process rather than wall time: the machines are shared (two cores, other
    test suites running), and time spent descheduled is not the code's cost.
    """
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        run(number)
        best = min(best, (time.process_time() - start) / number)
    return best


def classify_cost(exc: BaseException, number: int, repeat: int) -> float:
    """Return the seconds one classify(exc) takes."""

    def run(n: int) -> None:
        for _ in range(n):
            classify(exc)

    return per_call(run, number, repeat)


def failure_path_cost(factory: Factory, number: int, repeat: int) -> float:
    """Return the seconds building, raising (from a call) and catching the exception takes."""

    def fail() -> None:
        raise factory()

    def run(n: int) -> None:
        for _ in range(n):
            try:  # noqa: SIM105 - the bare try/except is what is measured
                fail()
            except BaseException:
                pass

    return per_call(run, number, repeat)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000, help="calls per timing run")
    parser.add_argument("--repeat", type=int, default=5, help="timing runs (best is kept)")
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    args = parser.parse_args(argv)
    number, repeat = (50, 1) if args.quick else (args.number, args.repeat)

    rows = []
    for name, factory in corpus():
        exc = factory()
        failure = classify(exc)
        cost = classify_cost(exc, number, repeat)
        path = failure_path_cost(factory, max(number // 4, 1), repeat)
        rows.append((name, failure.category.value, cost, path, cost / path))

    width = max(len(row[0]) for row in rows)
    header = (
        f"{'exception':<{width}}  {'category':<16} {'classify µs':>11} {'per s':>10} "
        f"{'fail path µs':>12} {'ratio':>6}"
    )
    print(header)
    print("-" * len(header))
    for name, category, cost, path, ratio in rows:
        print(
            f"{name:<{width}}  {category:<16} {cost * 1e6:>11.2f} {1 / cost:>10,.0f} "
            f"{path * 1e6:>12.2f} {ratio:>6.2f}"
        )
    print("-" * len(header))

    total = sum(row[2] for row in rows)
    overall = len(rows) / total
    median_ratio = statistics.median(row[4] for row in rows)
    plain = next(row for row in rows if row[0] == PLAIN_HTTP_STATUS)
    plain_rate = 1 / plain[2]
    print(
        f"corpus: {len(rows)} exceptions, {number} calls x {repeat} runs each "
        "(process CPU time, best run kept)"
    )
    print(f"classifications per second over the corpus: {overall:,.0f}")
    print(
        f"plain HTTP status error: {plain_rate:,.0f} classifications/s "
        f"(target >= {TARGET_RATE:,}: {'met' if plain_rate >= TARGET_RATE else 'MISSED'})"
    )
    print(
        f"median ratio classify / failure path: {median_ratio:.2f} "
        f"(target <= {TARGET_RATIO}: {'met' if median_ratio <= TARGET_RATIO else 'MISSED'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
