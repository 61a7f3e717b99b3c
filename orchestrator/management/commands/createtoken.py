"""`manage.py createtoken NAME [--callback URL]`; the webhook signing secret is printed once and
kept only encrypted (docs/api.md, "Webhooks")."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from orchestrator.models import ApiToken


class Command(BaseCommand):
    help = (
        "Create an API token for an agent or coordinator; prints only the secret on stdout "
        "(and, with --callback, the webhook signing secret on a second line)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="Who uses the token, e.g. 'research-coordinator'")
        parser.add_argument(
            "--callback",
            metavar="URL",
            default="",
            help="POST the resolutions of this token's review items here, signed",
        )

    def handle(self, *args: Any, name: str, callback: str, **options: Any) -> None:
        token, secret = ApiToken.issue_audited(name, note="createtoken command")
        self.stdout.write(secret)
        if callback:
            try:
                signing = token.set_callback(callback, actor="createtoken command")
            except ValidationError as exc:
                token.revoke()
                raise CommandError(f"Not a callback URL: {callback} ({exc})") from None
            self.stdout.write(signing)
