"""`python manage.py createtoken NAME`: create an API token and print only its secret."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from orchestrator.models import ApiToken


class Command(BaseCommand):
    help = "Create an API token for an agent or coordinator; prints only the secret on stdout."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="Who uses the token, e.g. 'research-coordinator'")

    def handle(self, *args: Any, name: str, **options: Any) -> None:
        _, secret = ApiToken.issue_audited(name, note="createtoken command")
        self.stdout.write(secret)
