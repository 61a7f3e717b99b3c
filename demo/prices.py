"""The demonstration's prices: the model its provider's answers name and each source's calls, put
in the price table at launch when it holds no row of that name, so that spend, wasted spend and
time lost move from the first runs. Each row is a policy change like an operator's (a version, an
audit row); an operator's own rows for those names are never replaced."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import Price

# The model the demonstration provider reports its answers' usage for (demo/provider.py).
MODEL = "demo-reader-small"
MODEL_PRICE = {"input_per_million": Decimal("0.50"), "output_per_million": Decimal("1.50")}
CALL_PRICES = {
    "web_search": Decimal("0.005"),
    "web_archive": Decimal("0.002"),
    "news_api": Decimal("0.004"),
    "news_wire": Decimal("0.003"),
    "news_archive": Decimal("0.002"),
    "scholar_api": Decimal("0.006"),
    "scholar_mirror": Decimal("0.002"),
    "internal_db": Decimal("0.001"),
    "crm_api": Decimal("0.001"),  # the external agent's tool (demo/agent.py)
}
# Before any run of the demonstration: every run it makes is priced.
SINCE = datetime(2024, 1, 1, tzinfo=UTC)
NOTE = "launch: the demonstration's price"


def seed_prices() -> int:
    """Add the demonstration's price rows missing from the table; return how many were added."""
    rows = [Price(kind=Price.Kind.MODEL, name=MODEL, **MODEL_PRICE)]
    rows += [
        Price(kind=Price.Kind.SOURCE_CALL, name=name, per_call=price)
        for name, price in CALL_PRICES.items()
    ]
    added = 0
    for row in rows:
        if Price.objects.filter(kind=row.kind, name=row.name).exists():
            continue
        row.effective_from, row.note = SINCE, NOTE
        save_policy_change(row, None, NOTE)
        added += 1
    return added
