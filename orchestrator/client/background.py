"""Reporting in the background: a daemon thread sends queued runs in batches, spools them to a
local file while the server is unreachable, and flushes at exit. A run's idempotency key travels
with it, so it is never stored twice; a reporting failure is counted, never raised into the agent.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import queue
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

logger = logging.getLogger("orchestrator.client")

JSON_HEADERS = {"Content-Type": "application/json"}


def default_spool_path(base_url: str, token: str) -> Path:
    """Return a spool file per server and token (under another token a run is another report)."""
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    name = hashlib.sha256(f"{base_url}\n{token}".encode()).hexdigest()[:16]
    return Path(cache) / "failsight" / f"spool-{name}.jsonl"


@dataclass
class ReportStats:
    """Counts of background reporting, in runs; `lost` runs will never reach the server."""

    queued: int = 0
    created: int = 0
    existing: int = 0  # a re-send after a lost answer
    rejected: int = 0
    lost: int = 0
    spooled: int = 0
    resent: int = 0
    send_failures: int = 0
    last_error: str = ""

    @property
    def stored(self) -> int:
        return self.created + self.existing


class Spool:
    """Runs waiting for the server, one JSON object per line, in a file that outlives the process.

    Changes hold a flock on a file beside it, so processes sharing a spool never interleave writes.
    """

    def __init__(self, path: Path, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._lock_path = path.with_name(path.name + ".lock")

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a") as lock:
            try:
                import fcntl
            except ImportError:  # no flock here: one process per spool
                yield
                return
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def append(self, items: list[dict[str, Any]]) -> bool:
        """Add runs at the end; False (nothing written) when the spool is full."""
        data = "".join(json.dumps(item, separators=(",", ":")) + "\n" for item in items)
        with self._locked():
            size = self.path.stat().st_size if self.path.exists() else 0
            if size + len(data) > self.max_bytes:
                return False
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        return True

    def read(self) -> list[dict[str, Any]]:
        with self._locked():
            return self._read()

    def remove(self, keys: set[str]) -> None:
        """Drop the runs with these idempotency keys: runs spooled meanwhile are kept."""
        with self._locked():
            kept = [item for item in self._read() if item.get("idempotency_key") not in keys]
            if not kept:
                self.path.unlink(missing_ok=True)
                return
            tmp = self.path.with_name(self.path.name + ".tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(item, separators=(",", ":")) + "\n" for item in kept)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)

    def _read(self) -> list[dict[str, Any]]:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        items = []
        for line in lines:
            try:
                item = json.loads(line)
            except ValueError:  # a line cut by a crash mid-write
                logger.warning("skipping an unreadable line of the spool %s", self.path)
                continue
            if isinstance(item, dict):
                items.append(item)
        return items


class _Flush:
    def __init__(self) -> None:
        self.done = threading.Event()


_LIVE_REPORTERS: weakref.WeakSet[Reporter] = weakref.WeakSet()


@atexit.register
def _flush_at_exit() -> None:
    for reporter in list(_LIVE_REPORTERS):
        reporter.close()


class Reporter:
    """The reporting thread of an AgentClient: the queue, batches, retries, the spool."""

    # While the server is unreachable it is probed again after these, doubling: no retry storm.
    PROBE_FIRST = 1.0
    PROBE_MAX = 30.0
    IDLE_WAIT = 0.2

    def __init__(
        self,
        client: Any,  # the AgentClient: module api imports this one, never the reverse
        spool_path: Path,
        *,
        queue_size: int,
        batch_size: int,
        flush_interval: float,
        flush_timeout: float,
    ) -> None:
        self.client = client
        self.spool = Spool(spool_path)
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.flush_timeout = flush_timeout
        self.queue_size = queue_size
        self._stats = ReportStats()
        self._stats_lock = threading.Lock()
        self._start()
        _LIVE_REPORTERS.add(self)
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: (r := ref()) and r._start())

    def _start(self) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(self.queue_size)
        self._closing = threading.Event()
        self._closed = False
        self._down_until = 0.0
        self._probe = self.PROBE_FIRST
        self._spool_dirty = True  # an earlier run of the agent may have left some
        self.thread = threading.Thread(target=self._run, name="failsight-reporter", daemon=True)
        self.thread.start()

    def put(self, item: dict[str, Any]) -> None:
        """Queue one run for the reporting thread; never blocks."""
        if self._closed:
            self.count_lost("the client is closed: run not reported")
            return
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self.count_lost(f"the report queue is full ({self.queue_size}): run not reported")
            return
        with self._stats_lock:
            self._stats.queued += 1

    def count_lost(self, message: str, count: int = 1, exc_info: bool = False) -> None:
        logger.warning("failsight: %s", message, exc_info=exc_info)
        with self._stats_lock:
            self._stats.lost += count
            self._stats.last_error = message

    def snapshot(self) -> ReportStats:
        with self._stats_lock:
            return dataclasses.replace(self._stats)

    def flush(self, timeout: float | None = None) -> bool:
        if self._closed or not self.thread.is_alive():
            return self.queue.empty()
        marker = _Flush()
        try:
            self.queue.put(marker, timeout=timeout)
        except queue.Full:
            return False
        return marker.done.wait(timeout)

    def close(self) -> None:
        """Stop taking runs; send what is queued for at most `flush_timeout` s, spool the rest."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        # Wake a thread waiting to fill a batch, or the join below would time out.
        with contextlib.suppress(queue.Full):
            self.queue.put_nowait(_Flush())
        self.thread.join(self.flush_timeout + 1.0)
        _LIVE_REPORTERS.discard(self)

    def _run(self) -> None:
        self._guarded(self._refresh_policies)
        self._guarded(self._resend_spool)
        while not self._closing.is_set():
            batch, markers = self._collect()
            if batch:
                self._guarded(self._deliver, batch)
            elif self._spool_dirty and time.monotonic() >= self._down_until:
                self._guarded(self._resend_spool)
            for marker in markers:
                marker.done.set()
        self._guarded(self._drain_on_close)

    def _guarded(self, step: Callable[..., Any], *args: Any) -> None:
        """Run one step of the thread; a bug in it loses that batch, never the thread."""
        try:
            step(*args)
        except Exception:
            logger.exception("failsight: reporting step failed")
            if args:
                self.count_lost(f"{len(args[0])} runs lost to an unexpected error", len(args[0]))

    def _collect(self) -> tuple[list[dict[str, Any]], list[_Flush]]:
        """Take runs until the batch is full or `flush_interval` has passed since the first."""
        batch: list[dict[str, Any]] = []
        markers: list[_Flush] = []
        deadline = time.monotonic() + self.IDLE_WAIT
        while len(batch) < self.batch_size and not markers:
            wait = deadline - time.monotonic()
            if wait <= 0:
                break
            try:
                item = self.queue.get(timeout=wait)
            except queue.Empty:
                break
            if isinstance(item, _Flush):
                markers.append(item)
                continue
            if not batch:
                deadline = time.monotonic() + self.flush_interval
            # Its secrets filtered here, off the agent's thread, before it is sent or spooled.
            batch.append(self.client.scrubbed(item))
        return batch, markers

    def _deliver(self, batch: list[dict[str, Any]], from_spool: bool = False) -> bool:
        batch, body = self._encoded(batch)
        if not batch:
            return True
        if time.monotonic() < self._down_until:
            self._to_spool(batch, from_spool)
            return False
        answer = self._send(batch, body)
        if answer is None:
            self._to_spool(batch, from_spool)
            return False
        self._count(batch, answer, from_spool)
        self._down_until, self._probe = 0.0, self.PROBE_FIRST
        if not from_spool and self._spool_dirty:
            self._resend_spool()
        self._refresh_policies()
        return True

    def _encoded(self, batch: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], bytes]:
        """Return the runs JSON can carry and the batch's body: a run JSON cannot hold is lost
        alone, instead of failing its whole batch."""
        kept, parts = [], []
        for item in batch:
            try:
                parts.append(json.dumps(item, separators=(",", ":"), allow_nan=False))
            except (TypeError, ValueError) as exc:
                self.count_lost(f"run {item.get('idempotency_key')} is not JSON: {exc}")
                continue
            kept.append(item)
        return kept, ('{"runs":[' + ",".join(parts) + "]}").encode()

    def _send(self, batch: list[dict[str, Any]], body: bytes) -> list[dict[str, Any]] | None:
        """POST the batch, retrying as the classifier advises; return its results, or None when it
        should wait in the spool."""
        client = self.client
        for attempt in range(1, client.max_attempts + 1):
            try:
                response = client.http.post("/runs/batch", content=body, headers=JSON_HEADERS)
                client._note_policy_version(response)
                response.raise_for_status()
                return response.json()["results"]
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
                failure = client.classify_exc(exc)
                with self._stats_lock:
                    self._stats.send_failures += 1
                    self._stats.last_error = f"{failure.category.value}: {failure.detail}"
                if not isinstance(exc, httpx.HTTPError) or not failure.retryable:
                    reason = f"{failure.category.value}: {failure.detail}"
                    message = f"the server refused {len(batch)} runs ({reason})"
                    self.count_lost(message, len(batch))
                    return []
                delay = None if self._closing.is_set() else client._retry_delay(failure, attempt)
                if delay is None:
                    break
                self._closing.wait(delay)
        self._down_until = time.monotonic() + self._probe
        self._probe = min(self._probe * 2, self.PROBE_MAX)
        return None

    def _count(self, batch: list, results: list[dict[str, Any]], from_spool: bool) -> None:
        with self._stats_lock:
            for item, result in zip(batch, results, strict=False):
                status = result.get("status")
                if status == "created":
                    self._stats.created += 1
                elif status == "existing":
                    self._stats.existing += 1
                else:
                    self._stats.rejected += 1
                    logger.warning(
                        "failsight: run %s refused: %s", item.get("idempotency_key"), result
                    )
            if from_spool:
                self._stats.resent += len(results)

    def _to_spool(self, batch: list[dict[str, Any]], from_spool: bool) -> None:
        if from_spool:
            return
        try:
            written = self.spool.append(batch)
        except (OSError, TypeError, ValueError):
            logger.warning("failsight: cannot write the spool %s", self.spool.path, exc_info=True)
            written = False
        if not written:
            self.count_lost(f"{len(batch)} runs lost: the spool cannot take them", len(batch))
            return
        self._spool_dirty = True
        with self._stats_lock:
            self._stats.spooled += len(batch)

    def _resend_spool(self) -> None:
        try:
            items = self.spool.read()
        except OSError:
            logger.warning("failsight: cannot read the spool %s", self.spool.path, exc_info=True)
            return
        for start in range(0, len(items), self.batch_size):
            if self._closing.is_set():
                return
            batch = items[start : start + self.batch_size]
            if not self._deliver(batch, from_spool=True):
                return
            try:
                self.spool.remove({item.get("idempotency_key") for item in batch})
            except OSError:
                logger.warning("failsight: cannot rewrite the spool", exc_info=True)
                return
        self._spool_dirty = False

    def _drain_on_close(self) -> None:
        deadline = time.monotonic() + self.flush_timeout
        pending: list[dict[str, Any]] = []
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, _Flush):
                item.done.set()
            else:
                pending.append(self.client.scrubbed(item))
        for start in range(0, len(pending), self.batch_size):
            batch = pending[start : start + self.batch_size]
            if time.monotonic() < deadline:
                self._deliver(batch)
            else:
                self._to_spool(batch, from_spool=False)

    def _refresh_policies(self) -> None:
        client = self.client
        if client.sync_policies and client._policies_stale():
            client.refresh_policies()
