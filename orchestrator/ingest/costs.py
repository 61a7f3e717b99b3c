"""The usage and cost columns of what an agent reports: its cost as reported, else its usage
(or its source's call) priced from the price table at the run's start (`orchestrator.pricing`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orchestrator import pricing
from orchestrator.models import Run
from orchestrator.schemas.usage import CostIn, UsageIn

# The run's columns `columns` fills, in its order.
COLUMNS = Run.USAGE_FIELDS


def columns(
    usage: UsageIn | None,
    cost: CostIn | None,
    source: str | None,
    at: datetime,
    table: pricing.PriceTable | None = None,
) -> dict[str, Any]:
    """The `COLUMNS` of a run of `source` started at `at`, by name (on every run ingested: one
    table lookup per kind), priced from `table` (a batch reads `pricing.current()` once) or the
    current one."""
    return dict(zip(COLUMNS, _values(usage, cost, source, at, table), strict=True))


def _values(
    usage: UsageIn | None,
    cost: CostIn | None,
    source: str | None,
    at: datetime,
    table: pricing.PriceTable | None,
) -> tuple:
    if usage is None:
        counts: tuple = (None, None, None, "")
    else:
        counts = (usage.input_tokens, usage.output_tokens, usage.cached_tokens, usage.model)
    if cost is not None:
        return (*counts, cost.amount, cost.currency, Run.CostSource.REPORTED)
    table = pricing.current() if table is None else table
    priced = table.cost(counts[3], *counts[:3], source or "", 1, at) if table else None
    if priced is None:
        return (*counts, *pricing.NO_COST)
    return (*counts, priced[0], priced[1], Run.CostSource.PRICED)


def finish_fields(usage: UsageIn | None, cost: CostIn | None, run: Run) -> dict[str, Any]:
    """The columns a finish (`PATCH /runs/{id}`) sets: the usage it reports, each count or model
    it leaves out the start's, priced at the run's start unless a cost is reported (now, or with
    the start)."""
    stored = UsageIn(
        input_tokens=run.input_tokens,
        output_tokens=run.output_tokens,
        cached_tokens=run.cached_tokens,
        model=run.model,
    )
    if usage is None:
        usage = stored
    else:
        usage = UsageIn(
            input_tokens=_given(usage.input_tokens, stored.input_tokens),
            output_tokens=_given(usage.output_tokens, stored.output_tokens),
            cached_tokens=_given(usage.cached_tokens, stored.cached_tokens),
            model=usage.model or stored.model,
        )
    if cost is None and run.cost_source == Run.CostSource.REPORTED:
        cost = CostIn(amount=run.cost, currency=run.cost_currency)
    return columns(usage, cost, run.source, run.priced_at)


def _given(value: int | None, stored: int | None) -> int | None:
    return stored if value is None else value
