"""`manage.py reprice [--model NAME | --source NAME] [--since ISO] [--until ISO]`: price runs again
at the price table as it is now (docs/operations.md, "Prices"). A price edit in the admin does it
by itself for the window it changed; this is for a window an operator names."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from orchestrator import pricing
from orchestrator.models import Price, Run


def _time(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise CommandError(f"Not an ISO 8601 time: {value!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Price runs again (those without a reported cost) from the price table; prints how many "
        "runs' costs changed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group()
        which.add_argument("--model", metavar="NAME", help="Runs of this model")
        which.add_argument("--source", metavar="NAME", help="Runs of this source")
        parser.add_argument("--since", type=_time, help="Runs started at or after (ISO 8601)")
        parser.add_argument("--until", type=_time, help="Runs started before (ISO 8601)")

    def handle(self, *args: Any, **options: Any) -> None:
        since = options["since"] or datetime.min.replace(tzinfo=UTC)
        until = options["until"]
        if options["model"]:
            windows = [pricing.Window(Price.Kind.MODEL, options["model"], since, until)]
        elif options["source"]:
            windows = [pricing.Window(Price.Kind.SOURCE_CALL, options["source"], since, until)]
        else:
            windows = [
                pricing.Window(Price.Kind.MODEL, name, since, until)
                for name in _names(Run.objects.exclude(model=""), "model")
            ]
            windows += [
                pricing.Window(Price.Kind.SOURCE_CALL, name, since, until)
                for name in _names(Run.objects.all(), "source")
            ]
        changed = 0
        for window in windows:
            changed += pricing.reprice(window)
        self.stdout.write(str(changed))


def _names(runs: Any, field: str) -> list[str]:
    return sorted(set(runs.values_list(field, flat=True).distinct()))
