"""The demonstration's workload: research workflows, started one after another, and a live summary.

A short tour first, whose fault plans make every failure type happen within the first minute;
then a seeded random stream, with the provider's fault mix deciding what fails.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime
from typing import Any

from django.db.models import Count

from insights import costs
from orchestrator.coordination.workflow import start_workflow
from orchestrator.models import ReviewItem, Run, Workflow

TOPICS = [
    "film",
    "music",
    "games",
    "books",
    "journalism",
    "education",
    "healthcare",
    "law",
    "farming",
    "architecture",
    "translation",
    "sport",
]
GOALS = [
    "Research the impact of AI",
    "Map recent regulation of AI",
    "Find case studies of AI adoption",
    "Summarise open problems of AI",
]
CAPABILITIES = [("news", 3), ("web", 3), ("scholar", 2), ("internal", 1)]
INTERNAL_TOPICS = ["payroll", "archives", "customers", "contracts", "incidents", "suppliers"]

# Each tour topic meets one planned fault (per attempt); what is not planned is drawn from the mix.
TOUR: list[dict[str, Any]] = [
    {
        "name": "Tour: AI in the newsroom",
        "capability": "news",
        "topics": ["film", "music", "games", "books", "law"],
        "faults": {
            "news_api:film": ["http:429:2", "ok:3"],  # rate limited, retried after Retry-After
            "news_api:music": ["drop", "ok:2"],  # connection dropped: transient
            "news_api:games": ["slow:4", "ok:2"],  # answers after the client's timeout
            "news_api:books": "http:404",  # missing: switch to news_wire
            "news_wire:books": "ok:2",
            "news_api:law": ["expire", "ok:4"],  # the key is revoked mid-run: refresh, retry
        },
    },
    {
        "name": "Tour: AI in research",
        "capability": "scholar",
        "topics": ["education", "healthcare", "journalism", "translation", "farming"],
        "faults": {
            "scholar_api:education": ["http:503", "ok:2"],  # server fault, retried with backoff
            "scholar_api:healthcare": ["http:529", "ok:1"],  # overloaded (a provider override)
            "scholar_api:journalism": "http:422",  # invalid input: no retry, a gap with a reason
            "scholar_api:translation": "empty",  # a valid empty result: a success, not an error
            "scholar_api:farming": ["partial:2:drop", "ok:5"],  # page 2 dropped: partial kept
        },
    },
    {
        "name": "Tour: AI in the back office",
        "capability": "internal",
        "topics": ["payroll", "incidents", "archives", "customers"],
        "faults": {
            # Forbidden, no refresher: escalated; an operator's "retry" (access granted) succeeds.
            "internal_db:payroll": ["http:403", "ok:2"],
            # No signal: unclassified, retried once, escalated; a "retry" from review succeeds.
            "internal_db:incidents": ["garbled", "garbled", "ok:3"],
            "internal_db:archives": "http:404",  # nowhere else to look: a gap
            "internal_db:customers": "ok:3",
        },
    },
]


def start_tour() -> list[Workflow]:
    return [
        start_workflow(
            t["name"],
            t["topics"],
            t["capability"],
            breadth=1,
            goal="Research the impact of AI",
            input={"faults": t["faults"], "demo": "tour"},
        )
        for t in TOUR
    ]


def start_random(rng: random.Random) -> Workflow:
    capability = rng.choices([c for c, _ in CAPABILITIES], [w for _, w in CAPABILITIES])[0]
    pool = INTERNAL_TOPICS if capability == "internal" else TOPICS
    topics = rng.sample(pool, k=rng.randint(2, 4))
    goal = rng.choice(GOALS)
    return start_workflow(
        f"{goal.replace(' of AI', '')} on {', '.join(topics)}",
        topics,
        capability,
        breadth=rng.choice([1, 1, 2]),
        goal=goal,
        input={"demo": "stream"},
    )


def summary() -> str:
    runs = Counter(dict(Run.objects.values_list("status").annotate(n=Count("pk")).order_by()))
    flows = Counter(dict(Workflow.objects.values_list("status").annotate(n=Count("pk")).order_by()))
    open_reviews = ReviewItem.objects.filter(state__in=ReviewItem.PENDING).count()
    types = Run.objects.exclude(failure_type=None).values("failure_type").distinct().count()
    pending = runs["queued"] + runs["running"]
    return (
        f"runs {sum(runs.values())} (ok {runs['succeeded']} · failed {runs['failed']} · "
        f"in flight {pending} · escalated {runs['escalated']}) · failure types {types}/8 · "
        f"workflows {sum(flows.values())} ({flows['succeeded'] + flows['degraded']} done · "
        f"{flows['awaiting_review']} awaiting review) · review queue {open_reviews}"
    )


def figures(since: datetime) -> str:
    """What the run came to since `since`: the review items still open (waiting for a person),
    and spend, wasted spend and time lost to failures as the Costs page counts them."""
    report = costs.report(since)
    total, currency = report.total, report.currency
    open_reviews = ReviewItem.objects.filter(state__in=ReviewItem.PENDING).count()
    return (
        f"open review items {open_reviews} · spend {total.spend:,.2f} {currency} · "
        f"wasted spend {total.wasted:,.2f} {currency} · time lost {_hours(total.lost)}"
    )


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.2f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"
