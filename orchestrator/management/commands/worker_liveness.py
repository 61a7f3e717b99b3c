"""`manage.py worker_liveness`: exit 1 when a worker is not consuming (messages wait in its
queues while it received none for longer than `--max-wait`), else 0. For a systemd watchdog
timer or a Kubernetes exec livenessProbe beside the worker (docs/operations.md)."""

from __future__ import annotations

import socket
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser
from django.db import DatabaseError
from django.utils import timezone

from orchestrator import liveness


class Command(BaseCommand):
    help = "Exit 1 if a Celery worker takes no message while messages wait (a stalled consumer)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--worker",
            action="append",
            help="A worker's node name (name@host), repeatable; default: this host's workers.",
        )
        parser.add_argument(
            "--max-wait",
            type=float,
            default=settings.WORKER_MAX_WAIT_SECONDS,
            help="Seconds messages may wait while the worker receives none (default: "
            "WORKER_MAX_WAIT_SECONDS). Keep it above the longest task.",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            verdicts = liveness.judge(opts["worker"], opts["max_wait"], host=socket.gethostname())
        except DatabaseError as exc:
            # Restarting the worker would not bring the database back.
            self.stdout.write(f"not judged: the database did not answer ({exc})")
            return
        if verdicts is None:
            self.stdout.write("not judged: the broker did not answer (the worker reconnects)")
            return
        if not verdicts:
            self.stdout.write("not judged: no worker has recorded its pulse yet (starting?)")
            return
        now = timezone.now()
        for verdict in verdicts:
            self.stdout.write(verdict.describe(now))
        if any(v.stalled for v in verdicts):
            raise SystemExit(1)
