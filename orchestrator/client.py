"""The Python agent client: report runs, ask for decisions, classify errors, time subagent calls.

    client = AgentClient("http://failsight:8000", token)
    with client.track("news-agent", "news_api", "search", attempted={"q": "film"}) as call:
        call.partial_results.append(first_page)      # kept if the call fails later
        call.results = fetch_everything()

The client retries its own HTTP calls only when the classifier says a retry can help (a timeout, a
reset connection, a 5xx, a 429 after its Retry-After), never a 401 or a 422; every report carries an
idempotency key that stays the same across those retries, so a retried report never doubles a run.
"""

from __future__ import annotations

import contextlib
import functools
import random
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from classifier import Classifier, Failure, FailureCategory, classify
from classifier.envelope import error_envelope, success_envelope


class ClientError(Exception):
    """An API call failed for good; `failure` says why, `body` is the server's error envelope."""

    def __init__(self, failure: Failure, body: Any = None) -> None:
        super().__init__(failure.detail or failure.category.value)
        self.failure = failure
        self.body = body


@dataclass
class Call:
    """One tracked subagent call: set `results`, append to `partial_results` as you go."""

    attempted: dict[str, Any]
    results: list[Any] = field(default_factory=list)
    partial_results: list[Any] = field(default_factory=list)
    alternatives: list[str] = field(default_factory=list)
    envelope: dict[str, Any] | None = None
    run: dict[str, Any] | None = None


class AgentClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        max_attempts: int = 3,
        max_wait: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        classifier: Classifier | None = None,
    ) -> None:
        root = base_url.rstrip("/")
        root = root if root.endswith("/api/v1") else f"{root}/api/v1"
        self.http = httpx.Client(
            base_url=root, timeout=timeout, headers={"Authorization": f"Bearer {token}"}
        )
        self.max_attempts = max_attempts
        self.max_wait = max_wait
        self.sleep = sleep
        self.classify_exc = classifier.classify if classifier else classify

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the API ---------------------------------------------------------------------------------

    def report(
        self,
        envelope: dict[str, Any],
        *,
        agent: str,
        source: str,
        idempotency_key: str | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """Report one run's envelope; return the stored run (replayed if the key was used)."""
        keep = ("status", "failure_type", "retryable", "retry_after", "attempted")
        keep += ("partial_results", "alternatives", "detail", "results", "status_code")
        keep += ("provider_code", "exception_type", "chain")
        body = {k: envelope[k] for k in keep if k in envelope and envelope[k] is not None}
        body |= {"agent": agent, "source": source} | {
            k: v for k, v in fields.items() if v is not None
        }
        key = idempotency_key or uuid.uuid4().hex
        return self._request("POST", "/runs", json=body, headers={"Idempotency-Key": key})

    def decide(
        self, failure: dict[str, Any], attempt: int, source: str, workflow: int | None = None
    ) -> dict[str, Any]:
        body = {"failure": failure, "attempt": attempt, "source": source, "workflow": workflow}
        return self._request("POST", "/decisions", json=body)

    def classify(self, description: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", "/classify", json=description)

    # -- tracking subagent calls -----------------------------------------------------------------

    @contextlib.contextmanager
    def track(
        self,
        agent: str,
        source: str,
        operation: str = "",
        attempted: dict[str, Any] | None = None,
        *,
        reraise: bool = True,
        **fields: Any,
    ) -> Iterator[Call]:
        """Time the block, classify what it raises, report the envelope with its partial results."""
        call = Call(
            attempted=dict(attempted or {}, **({"operation": operation} if operation else {}))
        )
        started = time.monotonic()
        try:
            yield call
        except Exception as exc:
            call.envelope = error_envelope(
                exc,
                attempted=call.attempted,
                partial_results=call.partial_results,
                alternatives=call.alternatives,
            )
            self._report_call(call, agent, source, operation, started, fields)
            if reraise:
                raise
        else:
            call.envelope = success_envelope(call.results, attempted=call.attempted)
            self._report_call(call, agent, source, operation, started, fields)

    def tracked(self, agent: str, source: str, operation: str = "", **fields: Any):
        """Decorator form of `track`: the function's return value is the results."""

        def wrap(fn: Callable[..., list[Any]]) -> Callable[..., list[Any]]:
            @functools.wraps(fn)
            def inner(*args: Any, **kwargs: Any) -> list[Any]:
                attempted = {"args": [repr(a)[:200] for a in args]} | {
                    k: repr(v)[:200] for k, v in kwargs.items()
                }
                with self.track(agent, source, operation, attempted, **fields) as call:
                    call.results = list(fn(*args, **kwargs))
                return call.results

            return inner

        return wrap

    def _report_call(
        self, call: Call, agent: str, source: str, operation: str, started: float, fields: dict
    ) -> None:
        duration = (time.monotonic() - started) * 1000
        assert call.envelope is not None
        call.run = self.report(
            call.envelope,
            agent=agent,
            source=source,
            operation=operation,
            duration_ms=round(duration, 3),
            **fields,
        )

    # -- HTTP with classified retries --------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        for attempt in range(1, self.max_attempts + 1):
            try:
                response = self.http.request(method, path, **kwargs)
                response.raise_for_status()
                return response.json()
            except httpx.HTTPError as exc:
                failure = self.classify_exc(exc)
                delay = self._retry_delay(failure, attempt)
                if delay is None:
                    body = _body(exc)
                    raise ClientError(failure, body) from exc
                self.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    def _retry_delay(self, failure: Failure, attempt: int) -> float | None:
        """Return how long to wait before retrying, or None if retrying cannot help."""
        # The classifier's own judgement (status, provider flags such as x-should-retry), except
        # that an error it cannot classify is not worth a blind retry of our own request.
        unknown = failure.category == FailureCategory.UNCLASSIFIED
        if attempt >= self.max_attempts or not failure.retryable or unknown:
            return None
        backoff = random.uniform(0, min(self.max_wait, 0.5 * 2 ** (attempt - 1)))
        wait = max(backoff, failure.retry_after or 0.0)
        return wait if wait <= self.max_wait else None


def _body(exc: httpx.HTTPError) -> Any:
    response = getattr(exc, "response", None)
    if response is None:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text
