"""The System page's lines: the Celery workers and queues (`orchestrator.workers`), the outbox,
the runs' leases, beat's last tick, failing webhook deliveries, and the database with the run
table's partitions. Each is read by an indexed query or the catalog, never a scan of the runs."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, Min, Q
from django.utils import timezone

from orchestrator import liveness, partitions, workers
from orchestrator.models import BeatTick, OutboxMessage, Run, WebhookDelivery

WEBHOOK_WINDOW = timedelta(days=7)


@dataclass
class WorkerLine:
    worker: workers.WorkerSeen
    online: bool
    silent_for: float
    heard: datetime


@dataclass
class Broker:
    """What the broker told: reachable, the queues' depths, the workers as last heard, when."""

    reachable: bool
    heartbeats: bool = True
    heard_at: datetime | None = None
    listened: bool = False
    queues: dict[str, int] = field(default_factory=dict)
    workers: list[WorkerLine] = field(default_factory=list)
    consumption: list[liveness.Verdict] = field(default_factory=list)

    @property
    def online(self) -> int:
        return sum(line.online for line in self.workers)

    def judged(self) -> Broker:
        """With each recorded worker judged by what it receives (its heartbeats prove its
        process, not its consumer)."""
        waiting = sum(self.queues.values())
        limit = settings.WORKER_MAX_WAIT_SECONDS
        self.consumption = liveness.judge_pulses(waiting, limit, timezone.now())
        return self


def broker(listen: bool) -> Broker:
    """The queues' depths and the workers; hear them anew (one heartbeat interval and a
    margin) when `listen`, else as the last listen heard them."""
    try:
        with workers.broker_connection() as conn:
            queues = workers.queue_depths(conn)
            if not workers.has_event_stream(conn):
                return Broker(reachable=True, heartbeats=False, queues=queues).judged()
            heard = workers.listen(conn) if listen else None
    except workers.BrokerUnavailable:
        return Broker(reachable=False, **_heard(*workers.remembered()))
    if heard is None:
        at, known = workers.remembered()
    else:
        at = time.time()
        known = workers.remember(heard, at)
    listened = heard is not None
    return Broker(reachable=True, listened=listened, queues=queues, **_heard(at, known)).judged()


def _heard(at: float | None, known: dict[str, workers.WorkerSeen]) -> dict[str, Any]:
    if at is None:
        return {}
    lines = [
        WorkerLine(w, w.online(at), w.silent_for(at), datetime.fromtimestamp(w.heard_at, UTC))
        for w in known.values()
    ]
    lines.sort(key=lambda line: (not line.online, line.worker.hostname))
    return {"heard_at": datetime.fromtimestamp(at, UTC), "workers": lines}


@dataclass
class Outbox:
    waiting: int
    oldest: datetime | None
    oldest_attempts: int = 0
    oldest_error: str = ""


def outbox() -> Outbox:
    """Messages not taken by the broker yet, and the oldest (the sweeper resends it)."""
    found = OutboxMessage.objects.aggregate(waiting=Count("id"), oldest=Min("created_at"))
    line = Outbox(found["waiting"], found["oldest"])
    if line.oldest is not None:
        first = OutboxMessage.objects.filter(created_at=line.oldest).order_by("id").first()
        if first is not None:
            line.oldest_attempts, line.oldest_error = first.attempts, first.last_error
    return line


@dataclass
class Leases:
    held: int
    expired: int
    oldest_expired: datetime | None


def leases(now: datetime) -> Leases:
    """Running runs whose worker holds a lease, and those whose lease ran out (a dead worker:
    the sweeper sends the run again)."""
    found = Run.objects.filter(status=Run.Status.RUNNING, lease_until__isnull=False).aggregate(
        held=Count("id", filter=Q(lease_until__gte=now)),
        expired=Count("id", filter=Q(lease_until__lt=now)),
        oldest_expired=Min("lease_until", filter=Q(lease_until__lt=now)),
    )
    return Leases(found["held"], found["expired"], found["oldest_expired"])


@dataclass
class Beat:
    last: datetime | None
    owner: str
    ticking: int
    late: bool


def beat(now: datetime) -> Beat:
    """Beat's last recorded tick, late past three recording intervals; and how many beats
    recorded one in the last two (more than one sends every periodic task twice; a restarted
    beat's previous process counts for those few seconds)."""
    every = timedelta(seconds=settings.BEAT_TICK_RECORD_SECONDS)
    latest = BeatTick.objects.order_by("-at").first()
    if latest is None:
        return Beat(None, "", 0, True)
    ticking = BeatTick.objects.since(now - 2 * every).count()
    return Beat(latest.at, latest.owner, ticking, now - latest.at > 3 * every)


@dataclass
class Webhooks:
    retrying: int
    given_up: int
    stalled: int
    last_error: str


def webhooks(now: datetime) -> Webhooks:
    """Deliveries whose last attempt failed and that will be tried again, those given up in the
    last week, and those whose attempt died with its worker (the sweeper resends them)."""
    pending = Q(state=WebhookDelivery.State.PENDING)
    recent = WebhookDelivery.objects.filter(Q(created_at__gte=now - WEBHOOK_WINDOW) | pending)
    found = recent.aggregate(
        retrying=Count("id", filter=pending & ~Q(last_error="")),
        given_up=Count("id", filter=Q(state=WebhookDelivery.State.FAILED)),
        stalled=Count("id", filter=pending & Q(lease_until__lt=now)),
    )
    failing = recent.exclude(last_error="").exclude(state=WebhookDelivery.State.DELIVERED)
    error = failing.order_by("-created_at", "-id").values_list("last_error", flat=True).first()
    return Webhooks(found["retrying"], found["given_up"], found["stalled"], error or "")


@dataclass
class Partition:
    name: str
    start: datetime | None
    end: datetime | None
    size: int
    rows: int | None

    @property
    def dropped_after(self) -> date | None:
        """The day retention drops it: once its last run is RUNS_RETENTION_DAYS old."""
        if self.end is None or not settings.RUNS_RETENTION_DAYS:
            return None
        return (self.end + timedelta(days=settings.RUNS_RETENTION_DAYS)).date()


@dataclass
class Database:
    vendor: str
    size: int
    partitions: list[Partition]
    retention_days: int

    @property
    def name(self) -> str:
        return {"postgresql": "PostgreSQL", "sqlite": "SQLite"}.get(self.vendor, self.vendor)


def database() -> Database:
    """The database's size (PostgreSQL's own count, SQLite's pages) and the run partitions."""
    days = settings.RUNS_RETENTION_DAYS
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA page_count")
            pages = cursor.fetchone()[0]
            cursor.execute("PRAGMA page_size")
            return Database(connection.vendor, pages * cursor.fetchone()[0], [], days)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        size = cursor.fetchone()[0]
    return Database(connection.vendor, size, run_partitions(), days)


def run_partitions() -> list[Partition]:
    """Each partition of the run table with its range, size and estimated runs (the planner's
    count of the last ANALYZE; None before one), the oldest first, the default one last."""
    if not partitions.is_partitioned():
        return []
    bounds = partitions.ranges()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_total_relation_size(c.oid), c.reltuples FROM pg_inherits i "
            "JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(%s)",
            [partitions.PARENT],
        )
        rows = cursor.fetchall()
    found = []
    for name, size, estimate in rows:
        start, end = bounds.get(name, (None, None))
        found.append(Partition(name, start, end, size, int(estimate) if estimate >= 0 else None))
    return sorted(found, key=lambda p: (p.start is None, p.start or datetime.min))
