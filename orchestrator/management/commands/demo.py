"""`python manage.py demo [--workflows N]`: start demonstration workflows through the coordinator.

They run on the fault-injecting demo provider (orchestrator.demo) with a seeded mix of failures, so
the dashboard has workflows, runs, review items and coverage to show. A worker must be running
(`celery -A config worker -B`) for them to progress.
"""

from __future__ import annotations

import random
from typing import Any

from django.core.management.base import BaseCommand

from orchestrator import coordinator

TOPICS = ["film", "music", "games", "books", "journalism", "education", "healthcare", "law"]
CAPABILITIES = ["news", "web", "scholar"]


class Command(BaseCommand):
    help = "Start demonstration workflows (seeded failures) through the real coordinator."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--workflows", type=int, default=6)
        parser.add_argument("--seed", type=int, default=None)

    def handle(self, *args: Any, workflows: int, seed: int | None, **options: Any) -> None:
        rng = random.Random(seed)
        for n in range(workflows):
            capability = CAPABILITIES[n % len(CAPABILITIES)]
            topics = rng.sample(TOPICS, k=rng.randint(3, 5))
            wf = coordinator.start_workflow(
                f"AI impact on {', '.join(topics)}",
                topics,
                capability,
                breadth=rng.choice([1, 1, 2]),
                goal="Research the impact of AI",
                input={"faults": {"*": "random", "seed": rng.randint(0, 10**6)}},
            )
            self.stdout.write(f"started workflow {wf.pk} ({capability}: {', '.join(topics)})")
