"""`manage.py createtoken NAME [--callback URL] [--running-timeout SECONDS] [--project SLUG]
[--scope read:all] [--scope act:all]`; the webhook signing secret is printed once and kept only
encrypted (docs/api.md, "Webhooks"). A token without --scope reads and acts on its own work only
(docs/api.md, "Scopes")."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from orchestrator.models import DEFAULT_PROJECT_ID, ApiToken, Project
from orchestrator.models.tokens import SCOPES


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
        parser.add_argument(
            "--running-timeout",
            metavar="SECONDS",
            type=int,
            default=None,
            help="How long a run this token reports as running may stay unfinished before the "
            "sweeper finishes it as a timeout (default: RUN_RUNNING_TIMEOUT)",
        )
        parser.add_argument(
            "--project",
            metavar="SLUG",
            default="",
            help="The project whose runs, workflows and review items the token reports and sees "
            "(default: the default project)",
        )
        parser.add_argument(
            "--scope",
            dest="scopes",
            action="append",
            choices=list(SCOPES),
            default=[],
            help="Grant a scope beyond the token's own work (repeat for both): read:all reads "
            "every token's runs, workflows and review items, act:all acts on them",
        )

    def handle(
        self, *args: Any, name: str, callback: str, running_timeout: int | None, **options: Any
    ) -> None:
        if running_timeout is not None and running_timeout < 1:
            raise CommandError(f"--running-timeout must be at least 1 second: {running_timeout}")
        timeout = timedelta(seconds=running_timeout) if running_timeout is not None else None
        project_id = DEFAULT_PROJECT_ID
        if options.get("project"):
            found = Project.objects.filter(slug=options["project"]).values_list("pk", flat=True)
            if not found:
                raise CommandError(f"No project with slug {options['project']}.")
            project_id = found[0]
        token, secret = ApiToken.issue_audited(
            name,
            note="createtoken command",
            running_timeout=timeout,
            project_id=project_id,
            scopes=options.get("scopes") or (),
        )
        self.stdout.write(secret)
        if callback:
            try:
                signing = token.set_callback(callback, actor="createtoken command")
            except ValidationError as exc:
                token.revoke()
                raise CommandError(f"Not a callback URL: {callback} ({exc})") from None
            self.stdout.write(signing)
