"""`manage.py rollups --hours 720`: backfill the tiles' rollups after an import of old runs (the
beat task keeps only the last few hours fresh)."""

from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from insights.stats import refresh_rollups


class Command(BaseCommand):
    help = "Recompute the hourly run rollups (and their six-hour blocks) of the last N hours."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--hours", type=int, default=24 * 7)

    def handle(self, *args: Any, hours: int, **options: Any) -> None:
        rows = refresh_rollups(timezone.now() - timedelta(hours=hours))
        self.stdout.write(f"{rows} rollup rows written for the last {hours} hours")
