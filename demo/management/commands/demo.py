"""`python manage.py demo [--workflows N]`: start demonstration workflows on the in-process
fault-injecting sources, for a worker running the same sources to progress."""

from __future__ import annotations

import random
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from demo import inprocess
from orchestrator.coordination.registry import registry
from orchestrator.coordination.workflow import start_workflow

SOURCES = "demo.inprocess"

TOPICS = ["film", "music", "games", "books", "journalism", "education", "healthcare", "law"]
CAPABILITIES = list(inprocess.CAPABILITIES)


class Command(BaseCommand):
    help = "Start demonstration workflows (seeded failures) through the real coordinator."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--workflows", type=int, default=6)
        parser.add_argument("--seed", type=int, default=None)

    def handle(self, *args: Any, workflows: int, seed: int | None, **options: Any) -> None:
        if SOURCES not in settings.FAILSIGHT_SOURCE_MODULES:
            raise CommandError(
                f"Set FAILSIGHT_SOURCE_MODULES={SOURCES} here and on the worker: these workflows "
                "run on the in-process demonstration sources (`make run` brings up its own)."
            )
        missing = [c for c in CAPABILITIES if not registry().sources_for(c)]
        if missing:
            raise CommandError(f"No sources registered for {', '.join(missing)}.")
        rng = random.Random(seed)
        for n in range(workflows):
            capability = CAPABILITIES[n % len(CAPABILITIES)]
            topics = rng.sample(TOPICS, k=rng.randint(3, 5))
            wf = start_workflow(
                f"AI impact on {', '.join(topics)}",
                topics,
                capability,
                breadth=rng.choice([1, 1, 2]),
                goal="Research the impact of AI",
                input={"faults": {"*": "random", "seed": rng.randint(0, 10**6)}},
            )
            self.stdout.write(f"started workflow {wf.pk} ({capability}: {', '.join(topics)})")
