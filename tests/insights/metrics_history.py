"""A hand-built history for /metrics' histograms and event counters, with what it implies: the
values each family observes, written down here from the rows this module creates."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.models import ReviewItem, Run, WebhookDelivery
from tests.dashboard.conftest import make_failure, make_run


@dataclass
class History:
    """Per histogram, the (labels, value) of each observation; per counter, counts by labels."""

    observed: dict[str, list[tuple[tuple[str, ...], float]]] = field(default_factory=dict)
    counted: dict[str, Counter] = field(default_factory=dict)
    # Finished runs per source: the volume /metrics ranks sources by.
    finished: Counter = field(default_factory=Counter)

    def observe(self, family: str, labels: tuple[str, ...], value: float) -> None:
        self.observed.setdefault(family, []).append((labels, value))

    def count(self, family: str, labels: tuple[str, ...]) -> None:
        self.counted.setdefault(family, Counter())[labels] += 1

    def add(self, family: str, labels: tuple[str, ...], n: int) -> None:
        self.counted.setdefault(family, Counter())[labels] += n

    def run(self, **fields: Any) -> Run:
        run = make_failure(**fields) if fields.get("failure_type") else make_run(**fields)
        if run.status in (Run.Status.SUCCEEDED, *Run.FAILURE):
            self.finished[run.source] += 1
        return run


def build(now: datetime, sources: dict[str, int]) -> History:
    """Runs, review items and webhook deliveries over the last ten hours (every source of
    `sources` with that many successes), and the observations they imply."""
    h = History()
    for n, (source, runs) in enumerate(sources.items()):
        for i in range(runs):
            seconds = (0.03, 0.3, 2.0, 45.0, 1200.0)[(n + i) % 5]
            agent = ("researcher", "librarian")[i % 2]
            created = now - timedelta(hours=(10, 1, 0)[i % 3], minutes=5 + i)
            h.run(agent=agent, source=source, created_at=created, duration_ms=seconds * 1000)
            h.observe("failsight_run_duration_seconds", (agent, source), seconds)
    _reports(h, now)
    _scrubbed(h, now)
    _decisions(h, now)
    _reviews(h, now)
    _webhooks(h, now)
    return h


def _reports(h: History, now: datetime) -> None:
    for lag, hours in ((0.05, 10), (3.0, 1), (400.0, 0)):
        created = now - timedelta(hours=hours, minutes=2)
        h.run(source="news_api", created_at=created, finished_at=created - timedelta(seconds=lag))
        h.observe("failsight_ingest_latency_seconds", (), lag)
    # Created queued, finished later (the coordinator's), or with no finish time: not reports.
    queued = now - timedelta(minutes=30)
    h.run(source="news_api", created_at=queued, finished_at=queued + timedelta(seconds=8))
    h.run(source="news_api", created_at=queued)


def _scrubbed(h: History, now: datetime) -> None:
    for hours, source, values in ((10, "news_api", 2), (0, "news_api", 1), (0, "web_search", 3)):
        h.run(
            source=source,
            created_at=now - timedelta(hours=hours, minutes=7),
            scrubbed_fields=values,
        )
        h.add("failsight_scrubbed_fields", (source,), values)


def _decisions(h: History, now: datetime) -> None:
    cases = (
        ("timeout", "retry", 0.02, True),
        ("timeout", "retry", 0.7, True),
        ("rate_limited", "wait", 12.0, True),
        ("auth_failure", "escalate", 400.0, False),  # reported with no finish time
        ("resource_missing", "switch_source", -2.0, True),  # the agent's clock ahead
    )
    for i, (ftype, action, after, finish_given) in enumerate(cases):
        created = now - timedelta(hours=(10, 0)[i % 2], minutes=3)
        finished = created - timedelta(seconds=1) if finish_given else None
        known = created  # the report came after the finish
        h.run(
            failure_type=ftype,
            source="news_api",
            created_at=created,
            finished_at=finished,
            decision=action,
            decided_at=known + timedelta(seconds=after),
        )
        h.observe("failsight_decision_latency_seconds", (), max(0.0, after))
        h.count("failsight_decisions", (action, ftype))
        if finish_given:
            h.observe("failsight_ingest_latency_seconds", (), 1.0)


def _reviews(h: History, now: datetime) -> None:
    cases = ((90.0, 7200.0), (None, 1800.0), (20.0, None), (None, None))
    for i, (claim, resolve) in enumerate(cases):
        opened = now - timedelta(hours=9 - i)
        run = h.run(failure_type="unclassified", source="web_search", created_at=opened)
        item = ReviewItem.objects.create(
            run=run, reason="unclassified", failure_type="unclassified", created_at=opened
        )
        fields: dict[str, Any] = {}
        if claim is not None:
            fields.update(
                state=ReviewItem.State.CLAIMED, claimed_at=opened + timedelta(seconds=claim)
            )
            h.observe("failsight_review_time_to_claim_seconds", (), claim)
        if resolve is not None:
            fields.update(
                state=ReviewItem.State.RESOLVED,
                resolution=ReviewItem.Resolution.ABORT,
                resolved_at=opened + timedelta(seconds=resolve),
            )
            h.observe("failsight_review_time_to_resolve_seconds", (), resolve)
        ReviewItem.objects.filter(pk=item.pk).update(**fields)


def _webhooks(h: History, now: datetime) -> None:
    State = WebhookDelivery.State
    cases = (
        ("review.resolved", State.DELIVERED, 1, 0.4),
        ("review.resolved", State.DELIVERED, 3, 6.5),
        ("alert.fired", State.DELIVERED, 2, 2.2),
        ("alert.fired", State.FAILED, 8, None),
        ("review.resolved", State.SUPERSEDED, 0, None),
        ("review.resolved", State.PENDING, 2, None),  # still trying: not settled
    )
    for i, (event, state, attempts, took) in enumerate(cases):
        queued = now - timedelta(hours=(6, 0)[i % 2], minutes=10)
        WebhookDelivery.objects.create(
            event=event,
            url="http://127.0.0.1:9/hook",
            state=state,
            attempts=attempts,
            created_at=queued,
            delivered_at=queued + timedelta(seconds=took) if took is not None else None,
        )
        if took is not None:
            h.observe("failsight_webhook_delivery_seconds", (event,), took)
        if state != State.PENDING:
            h.observe("failsight_webhook_delivery_attempts", (event,), float(attempts))
        if state == State.FAILED:
            h.count("failsight_webhook_failures", (event,))


# The labels of each family, in the order the history writes them.
LABELS = {
    "failsight_run_duration_seconds": ("agent", "source"),
    "failsight_decisions": ("action", "failure_type"),
    "failsight_scrubbed_fields": ("source",),
    "failsight_webhook_delivery_seconds": ("event",),
    "failsight_webhook_delivery_attempts": ("event",),
    "failsight_webhook_failures": ("event",),
}


def parse(text: str) -> dict[str, Metric]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def top(finished: Counter, n: int) -> Callable[[str], str]:
    """The bounding the documentation promises: the n names with the most finished runs (ties by
    name) keep their own, the others are `other` (all keep theirs while there are at most n)."""
    ranked = sorted(finished, key=lambda name: (-finished[name], name))
    kept = set(ranked[:n]) if len(ranked) > n else set(ranked)
    return lambda name: name if name in kept else "other"


def check_implied(h: History, families: dict[str, Metric], source: Callable[[str], str]) -> None:
    """Every histogram's buckets, count and sum, and every counter, as the history implies."""
    for name, observations in h.observed.items():
        expected: dict[tuple, list[float]] = {}
        for labels, value in observations:
            key = _labels(name, labels, source)
            expected.setdefault(key, []).append(value)
        samples = families[name].samples
        found = {_key(s.labels) for s in samples if s.name == f"{name}_count"}
        assert found == set(expected), (name, found, set(expected))
        for s in samples:
            values = expected[_key(s.labels)]
            if s.name == f"{name}_bucket":
                assert s.value == sum(v <= float(s.labels["le"]) for v in values), (name, s)
            elif s.name == f"{name}_count":
                assert s.value == len(values), (name, s)
            elif s.name == f"{name}_sum":
                assert s.value == pytest.approx(sum(values), abs=1e-3), (name, s)
    for name, counts in h.counted.items():
        samples = {_key(s.labels): s.value for s in families[name].samples}
        expected_counts: Counter = Counter()
        for labels, n in counts.items():
            expected_counts[_labels(name, labels, source)] += n
        assert samples == expected_counts, name


def _labels(family: str, values: tuple[str, ...], source: Callable[[str], str]) -> tuple:
    pairs = dict(zip(LABELS.get(family, ()), values, strict=True))
    if not family.startswith("failsight_webhook"):
        pairs["project"] = "default"  # every run and review item of the history is its
    if "source" in pairs:
        pairs["source"] = source(pairs["source"])
    return tuple(sorted(pairs.items()))


def _key(labels: dict[str, str]) -> tuple:
    return tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
