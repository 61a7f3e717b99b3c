"""The synchronous agent API: `AgentClient`, `Review` handles, `verify_signature`, `ClientError`.

The client retries its own calls only when the classifier says a retry can help, under one
idempotency key, so a retried report never doubles a run. What `track` raises is classified with
the server's provider overrides, fetched again whenever an answer names a newer policy version.
Secrets are filtered out of every report before it is sent or spooled (`classifier.scrub`, with
the scrub rules fetched with the overrides), as the server does again before storing it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx

from classifier import Classifier, Failure, FailureCategory, Overrides, classify
from classifier.envelope import error_envelope, success_envelope
from classifier.scrub import Scrubber, ScrubRules
from classifier.usage import usage_of
from orchestrator.client.background import Reporter, ReportStats, default_spool_path

logger = logging.getLogger("orchestrator.client")

POLICY_VERSION_HEADER = "X-Policy-Version"
POLICY_RETRY_SECONDS = 30.0
USAGE_KEYS = frozenset({"input_tokens", "output_tokens", "cached_tokens", "model"})
REPORTED_FIELDS = (
    "status",
    "failure_type",
    "retryable",
    "retry_after",
    "attempted",
    "partial_results",
    "alternatives",
    "detail",
    "results",
    "status_code",
    "provider_code",
    "exception_type",
    "signal",
    "chain",
    "taxonomy_version",
    "classified_policy_version",
    "usage",
    "cost",
)


class ClientError(Exception):
    """An API call failed for good; `failure` says why, `body` is the server's error envelope."""

    def __init__(self, failure: Failure, body: Any = None) -> None:
        super().__init__(failure.detail or failure.category.value)
        self.failure = failure
        self.body = body


@dataclass
class Call:
    """One tracked subagent call: set `results`, append to `partial_results` as you go; set
    `usage` (a dict of the report's `usage` fields, or the provider's response itself, read by
    `classifier.usage.usage_of`) and `cost` (an amount in USD, or {"amount", "currency"}) when
    you know them. A failure's exception that carries its usage reports it by itself."""

    attempted: dict[str, Any]
    results: list[Any] = field(default_factory=list)
    partial_results: list[Any] = field(default_factory=list)
    alternatives: list[str] = field(default_factory=list)
    envelope: dict[str, Any] | None = None
    run: dict[str, Any] | None = None  # strict mode only
    key: str = ""  # the run's idempotency key
    usage: Any = None
    cost: Any = None

    def spent(self) -> dict[str, Any]:
        """The `usage` and `cost` fields this call reports, those it knows."""
        fields: dict[str, Any] = {}
        usage = self.usage
        if usage is not None and not (isinstance(usage, dict) and usage.keys() <= USAGE_KEYS):
            usage = usage_of(usage)
        if usage:
            fields["usage"] = usage
        if self.cost is not None:
            cost = self.cost
            fields["cost"] = str(cost) if isinstance(cost, Decimal) else cost
        return fields


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
        strict: bool = False,
        spool_path: str | os.PathLike[str] | None = None,
        queue_size: int = 10_000,
        batch_size: int = 100,
        flush_interval: float = 1.0,
        flush_timeout: float = 5.0,
        refresher: Callable[[], Any] | None = None,
    ) -> None:
        """`classifier`, if given, replaces the one holding the server's overrides.

        `refresher`, if given, refreshes the agent's own credentials: `decide` then tells the
        server it can, and calls it when the decision says `refresh` (see `decide`).

        `strict` reports each tracked run synchronously (raising if that fails). Otherwise a
        thread sends them in batches, spools them to `spool_path` while the server is unreachable,
        and on `close()` or exit sends what is left for at most `flush_timeout` seconds."""
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
        self.policy_version: str | None = None
        self.server_policy_version: str | None = None
        self._policy_classifier = Classifier()
        self.scrubber = Scrubber()
        self._policy_lock = threading.Lock()
        self._policy_failed_at: float | None = None
        self.strict = strict
        self.refresher = refresher
        self.reporter: Reporter | None = None
        if not strict:
            self.reporter = Reporter(
                self,
                Path(spool_path) if spool_path else default_spool_path(root, token),
                queue_size=queue_size,
                batch_size=batch_size,
                flush_interval=flush_interval,
                flush_timeout=flush_timeout,
            )

    @property
    def stats(self) -> ReportStats:
        return self.reporter.snapshot() if self.reporter else ReportStats()

    def flush(self, timeout: float | None = None) -> bool:
        """Send what waits on the queue now; True once it was answered or spooled in time."""
        return self.reporter.flush(timeout) if self.reporter else True

    def close(self) -> None:
        """Send what is queued (at most `flush_timeout` seconds, then spooled), then close."""
        if self.reporter is not None:
            self.reporter.close()
        self.http.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        body = self.scrubbed(report_body(envelope, agent=agent, source=source, **fields))
        key = idempotency_key or uuid.uuid4().hex
        return self._request("POST", "/runs", json=body, headers=self._idempotency(key))

    def decide(
        self,
        run_id: int | None = None,
        failure: dict[str, Any] | None = None,
        *,
        attempt: int = 1,
        source: str | None = None,
        workflow: int | None = None,
        tried: list[str] | None = None,
        alternatives: list[str] | None = None,
    ) -> dict[str, Any]:
        """Ask what to do after a failure. With `run_id` the decision is recorded on the run
        once; without, `failure` and `source` say what failed and nothing is recorded, and
        `alternatives` (sources this agent can call instead) come back ranked by switch
        efficacy, the best untried one as `switch_to`.

        With a `refresher`, an auth failure may be answered `retry` with `refresh: true`: the
        refresher is called here, and the caller retries once (an auth failure again is then
        escalated by the server). A refresher that raises turns the answer into `escalate`
        (with `run_id`, the run is sent to review and the answer carries `review`)."""
        failure = self.scrubbed(failure) if failure else failure
        body = {"run": run_id, "failure": failure, "attempt": attempt, "source": source}
        body |= {"workflow": workflow, "tried": tried or [], "alternatives": alternatives or []}
        body |= {"can_refresh": True if self.refresher is not None else None}
        answer = self._request(
            "POST", "/decisions", json={k: v for k, v in body.items() if v not in (None, [])}
        )
        if answer.get("refresh") and self.refresher is not None:
            answer = self._refreshed(answer, run_id)
        return answer

    def _refreshed(self, answer: dict[str, Any], run_id: int | None) -> dict[str, Any]:
        """Call the refresher a decision asked for; an `escalate` answer if it raised."""
        try:
            self.refresher()  # type: ignore[misc]
        except Exception as exc:  # whatever the agent's refresher raises, a human decides
            why = f"refreshing the credentials failed ({type(exc).__name__}: {exc})"
            logger.warning("%s; escalating", why)
            escalated = answer | {"action": "escalate", "refresh": False, "delay_seconds": 0.0}
            escalated["reason"] = f"{answer.get('reason', '')} But {why}, so a human decides."
            if run_id is not None:
                review = self.escalate(run_id, why)
                escalated["review"] = {"id": review.id, "url": review.url}
            return escalated
        return answer

    def start(
        self,
        agent: str,
        source: str,
        operation: str = "",
        attempted: dict[str, Any] | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """Report a run as started (`running`) and return it, synchronously: the agent needs its
        id."""
        body = {"status": "running", "agent": agent, "source": source, "operation": operation}
        body |= {"attempted": attempted or {}, "started_at": _utc_now()}
        body |= {k: v for k, v in fields.items() if v is not None}
        key = fields.pop("idempotency_key", None) or uuid.uuid4().hex
        body.pop("idempotency_key", None)
        return self._request(
            "POST", "/runs", json=self.scrubbed(body), headers=self._idempotency(key)
        )

    def finish(
        self,
        run_id: int,
        outcome: dict[str, Any] | BaseException,
        *,
        source: str | None = None,
        partial_results: list[Any] | None = None,
        attempted: dict[str, Any] | None = None,
        usage: Any = None,
        cost: Any = None,
    ) -> dict[str, Any]:
        """Finish a started run with its envelope, or with the exception it failed with, and
        what it used and cost (as `Call.usage` and `Call.cost` take them); return the stored
        run."""
        if isinstance(outcome, BaseException):
            envelope = self._error_envelope(
                outcome,
                attempted=attempted or {},
                partial_results=partial_results or [],
                provider=source,
            )
        else:
            envelope = dict(outcome)
        body = {k: envelope[k] for k in REPORTED_FIELDS if envelope.get(k) is not None}
        body |= Call(attempted={}, usage=usage, cost=cost).spent()
        body["finished_at"] = _utc_now()
        return self._request("PATCH", f"/runs/{run_id}", json=self.scrubbed(body))

    def start_workflow(
        self, name: str, topics: list[str], *, idempotency_key: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Start a workflow this agent's own coordinator runs: report its runs with
        `workflow=<id>, topic=…`, then `finish_workflow`. Asking again with the same
        `idempotency_key` returns the same workflow."""
        body = {"name": name, "topics": topics, "coordinator": "external"} | fields
        key = idempotency_key or uuid.uuid4().hex
        return self._request("POST", "/workflows", json=body, headers=self._idempotency(key))

    def finish_workflow(self, workflow_id: int) -> dict[str, Any]:
        """Settle the workflow's coverage from its runs (not while a review item is open)."""
        return self._request("POST", f"/workflows/{workflow_id}/finish")

    def escalate(self, run_id: int, reason: str) -> Review:
        """Send a failed run to human review; return a handle to `.wait` on and `.ack`."""
        self._sync_policies()
        reason = self.scrubber.text(reason)[0]
        data = self._request("POST", "/reviews", json={"run": run_id, "reason": reason})
        return Review(self, data)

    def review(self, item_id: int) -> Review:
        return Review(self, self._request("GET", f"/reviews/{item_id}"))

    def resolutions(self, page_size: int = 50) -> Iterator[Review]:
        """Yield the resolutions of this token's review items not acknowledged yet, earliest
        first."""
        params: dict[str, Any] = {"state": "resolved", "delivered": "false", "limit": page_size}
        while True:
            page = self._request("GET", "/reviews", params=params)
            for item in page["items"]:
                yield Review(self, item)
            if not page["next_cursor"]:
                return
            params["cursor"] = page["next_cursor"]

    def classify(self, description: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", "/classify", json=description)

    def policies(self) -> dict[str, Any]:
        return self._request("GET", "/policies")

    def report_classifier(self) -> Classifier:
        """Return the classifier for what `track` raises."""
        if self.classifier is not None:
            return self.classifier
        self._sync_policies()
        return self._policy_classifier

    def _sync_policies(self) -> None:
        # Never on the agent's thread when a reporting thread exists: that thread syncs them.
        if self.sync_policies and self.reporter is None and self._policies_stale():
            self.refresh_policies()

    def refresh_policies(self) -> bool:
        """Fetch the server's enabled overrides and scrub rules; False (keeping the old ones) if
        that failed."""
        with self._policy_lock:
            try:
                body = self._fetch_policies()
            except (httpx.HTTPError, ValueError, KeyError, TypeError):
                logger.warning("could not fetch the server's policies", exc_info=True)
                self._policy_failed_at = time.monotonic()
                return False
            self._policy_classifier = Classifier(overrides=Overrides.from_data(body["overrides"]))
            self.scrubber = Scrubber(ScrubRules.from_data(body.get("scrub_rules") or ()))
            self.policy_version = str(body["version"])
            self._policy_failed_at = None
            return True

    def _fetch_policies(self) -> dict[str, Any]:
        # No retry loop: a classification must never wait on a struggling server.
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

    def _error_envelope(self, exc: BaseException, **fields: Any) -> dict[str, Any]:
        """The envelope of `exc` as `report_classifier()` reads it, with the policy version of
        the server's overrides it held, so that the server classifies again when newer ones
        exist (none when the caller gave its own classifier)."""
        classifier = self.report_classifier()
        version = self.policy_version  # read before the check: never newer than the classifier
        envelope = error_envelope(exc, classifier=classifier, **fields)
        if classifier is self._policy_classifier and version and version.isdigit():
            envelope["classified_policy_version"] = int(version)
        return envelope

    def _idempotency(self, key: str) -> dict[str, str]:
        """The Idempotency-Key header: a key holding a credential goes as its digest."""
        return {"Idempotency-Key": self.scrubber.idempotency_key(key)}

    def scrubbed(self, body: dict[str, Any]) -> dict[str, Any]:
        """`body` with the secrets of every field filtered (`Scrubber.report`: the names of the
        report too; a new dict if any were), by the built-in rules and the server's scrub rules
        last fetched."""
        self._sync_policies()
        clean, _ = self.scrubber.report(body)
        return body if clean == body else clean

    def _note_policy_version(self, response: httpx.Response) -> None:
        version = response.headers.get(POLICY_VERSION_HEADER)
        if version:
            self.server_policy_version = version

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
            attempted=dict(attempted or {}, **({"operation": operation} if operation else {})),
            key=uuid.uuid4().hex,
        )
        started = time.monotonic()
        try:
            yield call
        except Exception as exc:
            call.envelope = self._error_envelope(
                exc,
                attempted=call.attempted,
                partial_results=call.partial_results,
                alternatives=call.alternatives,
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
        duration = round((time.monotonic() - started) * 1000, 3)
        assert call.envelope is not None
        fields = fields | call.spent()
        if self.reporter is None:
            call.run = self.report(
                call.envelope,
                agent=agent,
                source=source,
                idempotency_key=call.key,
                operation=operation,
                duration_ms=duration,
                **fields,
            )
            return
        try:
            item = report_body(
                call.envelope,
                agent=agent,
                source=source,
                operation=operation,
                duration_ms=duration,
                finished_at=_utc_now(),
                **fields,
            )
            item["idempotency_key"] = call.key
            self.reporter.put(item)
        except Exception:  # the agent's code never pays for our reporting
            self.reporter.count_lost("could not queue a run", exc_info=True)

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        for attempt in range(1, self.max_attempts + 1):
            try:
                response = self.http.request(method, path, **kwargs)
                self._note_policy_version(response)
                response.raise_for_status()
            except httpx.HTTPError as exc:
                failure = self.classify_exc(exc)
                delay = self._retry_delay(failure, attempt)
                if delay is None:
                    body = _body(exc)
                    raise ClientError(failure, body) from exc
                self.sleep(delay)
                continue
            try:
                return response.json()
            except ValueError as exc:
                # A 2xx whose body is not JSON (a proxy's page, a cut body) is a failure of the
                # call like any other, not an exception of another kind escaping the client.
                raise ClientError(self.classify_exc(exc), response.text[:500]) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _retry_delay(self, failure: Failure, attempt: int) -> float | None:
        """Return how long to wait before retrying, or None if retrying cannot help."""
        # An error the classifier cannot classify is not worth a blind retry of our own request.
        unknown = failure.category == FailureCategory.UNCLASSIFIED
        if attempt >= self.max_attempts or not failure.retryable or unknown:
            return None
        backoff = random.uniform(0, min(self.max_wait, 0.5 * 2 ** (attempt - 1)))
        wait = max(backoff, failure.retry_after or 0.0)
        return wait if wait <= self.max_wait else None


class Review:
    """A review item as an agent holds it: its state, and the resolution once an operator
    decided."""

    # The server answers a long poll after at most this long.
    LONGEST_POLL = 30.0

    def __init__(self, client: AgentClient, data: dict[str, Any]) -> None:
        self.client = client
        self.data = data

    def __repr__(self) -> str:
        return f"<Review {self.id} {self.state}>"

    @property
    def id(self) -> int:
        return self.data["id"]

    @property
    def url(self) -> str | None:
        return self.data.get("url")

    @property
    def state(self) -> str:
        return self.data["state"]

    @property
    def resolution(self) -> dict[str, Any] | None:
        return self.data.get("resolution")

    def wait(self, timeout: float | None = None) -> dict[str, Any] | None:
        """Long-poll until an operator resolves the item; return the resolution, or None if
        `timeout` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.resolution is None:
            left = self.LONGEST_POLL if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return None
            poll = min(self.LONGEST_POLL, left)
            patience = (self.client.http.timeout.read or 10.0) + poll
            data = self.client._request(
                "GET", f"/reviews/{self.id}", params={"wait": round(poll, 3)}, timeout=patience
            )
            self._update(data)
        return self.resolution

    def ack(self) -> dict[str, Any]:
        """Tell the server the resolution was picked up."""
        self._update(self.client._request("POST", f"/reviews/{self.id}/ack"))
        return self.data

    def _update(self, data: dict[str, Any]) -> None:
        self.data = data | ({"url": self.url} if self.url else {})


def verify_signature(
    secret: str, header: str, body: bytes, tolerance: float = 300.0, now: float | None = None
) -> bool:
    """Return whether a webhook's `Failsight-Signature` (t=<unix>,v1=<hex HMAC-SHA256 of
    "<t>.<body>">) matches the token's signing secret within `tolerance` seconds."""
    parts = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        stamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - stamp) > tolerance:
        return False
    mac = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(mac, parts.get("v1", ""))


def _body(exc: httpx.HTTPError) -> Any:
    response = getattr(exc, "response", None)
    if response is None:
        return None
    try:
        return response.json()
    except ValueError:
        return response.text


def report_body(envelope: dict[str, Any], *, agent: str, source: str, **fields: Any) -> dict:
    body = {k: envelope[k] for k in REPORTED_FIELDS if envelope.get(k) is not None}
    body |= {"agent": agent, "source": source}
    return body | {k: v for k, v in fields.items() if v is not None}


def _utc_now() -> str:
    return datetime.now(UTC).isoformat()
