"""`python manage.py launch` (what `make run` calls): the whole product on one machine.

Migrates, creates a local admin (its password printed once, on creation) and a fresh API token
for local agents, starts a real Celery worker with an embedded beat (on kombu's filesystem broker
by default, so no server is needed), seeds the demonstration workflows on first launch, and serves
the dashboard and the API until Ctrl-C.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group, User
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandParser

from orchestrator.models import ApiToken, Workflow

ADMIN_USERNAME = "admin"
LAUNCH_TOKEN_NAME = "local-agent (make run)"


class Command(BaseCommand):
    help = "Migrate, bootstrap an admin and a token, start a worker and serve on 127.0.0.1:8000."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--addr", default=os.environ.get("LAUNCH_ADDR", "127.0.0.1:8000"))
        parser.add_argument("--no-worker", action="store_true", help="Serve only")
        parser.add_argument("--no-demo", action="store_true", help="Do not seed demo workflows")

    def handle(self, *args: Any, addr: str, no_worker: bool, no_demo: bool, **opts: Any) -> None:
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write(self.style.SUCCESS("Database migrated: " + _db_label()))
        self._bootstrap_admin()
        self._issue_launch_token()
        worker = None if no_worker else self._start_worker()
        # `timeout`, systemd and CI stop us with SIGTERM: unwind so the worker is stopped too.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            if not no_demo and "demo" in get_commands() and not Workflow.objects.exists():
                call_command("demo")
            self.stdout.write(
                self.style.SUCCESS(
                    f"Dashboard http://{addr}/  ·  API docs http://{addr}/api/v1/docs  ·  "
                    f"admin http://{addr}/admin/"
                )
            )
            call_command("runserver", addr, use_reloader=False, use_threading=True)
        finally:
            if worker is not None:
                worker.send_signal(signal.SIGTERM)
                try:
                    worker.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    worker.kill()

    def _bootstrap_admin(self) -> None:
        if User.objects.filter(username=ADMIN_USERNAME).exists():
            self.stdout.write(
                f"Admin user '{ADMIN_USERNAME}' exists (its password was printed "
                "at first launch; `manage.py changepassword admin` resets it)."
            )
            return
        password = secrets.token_urlsafe(12)
        user = User.objects.create_superuser(ADMIN_USERNAME, password=password)
        user.groups.add(*Group.objects.filter(name__in=["operators", "policy editors"]))
        self.stdout.write(
            self.style.WARNING(
                f"Created admin user '{ADMIN_USERNAME}' with password: {password}  (shown once)"
            )
        )

    def _issue_launch_token(self) -> None:
        # One live launch token at a time: each launch revokes the previous one (audited).
        for old in ApiToken.objects.active().filter(name=LAUNCH_TOKEN_NAME):
            old.revoke_audited(note="replaced by a new launch")
        _, secret = ApiToken.issue_audited(LAUNCH_TOKEN_NAME, note="launch")
        self.stdout.write(self.style.WARNING(f"API token for local agents: {secret}"))

    def _start_worker(self) -> subprocess.Popen:
        cmd = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "-B",
            "--loglevel",
            "INFO",
            "--concurrency",
            "2",
            "--schedule",
            settings.CELERY_BEAT_SCHEDULE_FILENAME,
        ]
        self.stdout.write(f"Starting a Celery worker with beat on {settings.CELERY_BROKER_URL}")
        return subprocess.Popen(cmd, env=os.environ.copy())


def _db_label() -> str:
    db = settings.DATABASES["default"]
    return f"{db['ENGINE'].rsplit('.', 1)[-1]} {db['NAME']}"
