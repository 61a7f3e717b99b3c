"""The Python agent client: report runs, ask for decisions, classify errors, time subagent calls.

    client = AgentClient("http://failsight:8000", token)
    with client.track("news-agent", "news_api", "search", attempted={"q": "film"}) as call:
        call.partial_results.append(first_page)      # kept if the call fails later
        call.results = fetch_everything()

The client retries its own HTTP calls only when the classifier says a retry can help (a timeout, a
reset connection, a 5xx, a 429 after its Retry-After), never a 401 or a 422; every report carries an
idempotency key that stays the same across those retries, so a retried report never doubles a run.

What `track` raises is classified here, with the provider overrides operators edit on the server:
every answer carries `X-Policy-Version`, and when it differs from the version of the overrides the
client holds, the next classification fetches `GET /policies` first (once per version; a failed
fetch keeps the overrides it had). This module talks to the server over HTTP only: it imports
`classifier` and httpx, nothing of the server's.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from classifier import Classifier, Failure, FailureCategory, Overrides, classify
from classifier.envelope import error_envelope, success_envelope

logger = logging.getLogger(__name__)

# The header every answer of the API carries (the server's `X-Policy-Version`).
POLICY_VERSION_HEADER = "X-Policy-Version"
# After a failed fetch of the policies, how long before the next attempt (seconds).
POLICY_RETRY_SECONDS = 30.0


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
        sync_policies: bool = True,
    ) -> None:
        """`classifier`, if given, classifies what `track` raises (instead of one holding the
        server's overrides, which `sync_policies` keeps current) and the client's own errors."""
        root = base_url.rstrip("/")
        root = root if root.endswith("/api/v1") else f"{root}/api/v1"
        self.http = httpx.Client(
            base_url=root, timeout=timeout, headers={"Authorization": f"Bearer {token}"}
        )
        self.max_attempts = max_attempts
        self.max_wait = max_wait
        self.sleep = sleep
        self.classify_exc = classifier.classify if classifier else classify
        self.classifier = classifier
        self.sync_policies = sync_policies and classifier is None
        self.policy_version: str | None = None  # the version of the overrides held
        self.server_policy_version: str | None = None  # the latest version an answer named
        self._policy_classifier = Classifier()
        self._policy_lock = threading.Lock()
        self._policy_failed_at: float | None = None

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
        keep += ("provider_code", "exception_type", "signal", "chain", "taxonomy_version")
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

    def policies(self) -> dict[str, Any]:
        """The routing table and the enabled provider overrides, with their version."""
        return self._request("GET", "/policies")

    # -- the server's overrides, for classifying here --------------------------------------------

    def report_classifier(self) -> Classifier:
        """The classifier for what `track` raises: the one given, else one holding the server's
        enabled provider overrides, fetched again first if an answer named a newer version."""
        if self.classifier is not None:
            return self.classifier
        if self.sync_policies and self._policies_stale():
            self.refresh_policies()
        return self._policy_classifier

    def refresh_policies(self) -> bool:
        """Fetch the server's enabled overrides; False (keeping the old ones) if that failed."""
        with self._policy_lock:
            try:
                body = self._fetch_policies()
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                logger.warning("could not fetch the server's policies", exc_info=True)
                self._policy_failed_at = time.monotonic()
                return False
            self._policy_classifier = Classifier(overrides=Overrides.from_data(body["overrides"]))
            self.policy_version = str(body["version"])
            self._policy_failed_at = None
            return True

    def _fetch_policies(self) -> dict[str, Any]:
        # One attempt, no retry loop: a classification must never wait on a struggling server.
        response = self.http.get("/policies")
        self._note_policy_version(response)
        response.raise_for_status()
        return response.json()

    def _policies_stale(self) -> bool:
        failed = self._policy_failed_at
        if failed is not None and time.monotonic() - failed < POLICY_RETRY_SECONDS:
            return False
        if self.policy_version is None:
            return True
        # A server that names no version (an older one) is not asked again on every failure.
        named = self.server_policy_version
        return named is not None and named != self.policy_version

    def _note_policy_version(self, response: httpx.Response) -> None:
        version = response.headers.get(POLICY_VERSION_HEADER)
        if version:
            self.server_policy_version = version

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
                classifier=self.report_classifier(),
                provider=source,
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
                self._note_policy_version(response)
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
