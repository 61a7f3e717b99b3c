"""What a run cost, from the price table (`Price`): a run whose agent reported tokens or a source
call without a cost is priced at ingest at the prices in effect when it started, and an edit of a
price prices again the runs of the window it changed (`reprice`).

A run's priced cost is its model's tokens (input tokens count the cached ones: the uncached part
at the input price, the cached part at the cached price, which defaults to the input price;
output at the output price) plus its source's price per call, each from the row of its kind and
name whose `effective_from` is the latest at or before the run's start. Both in one currency are
added; in two, the model's price stands alone. Decimal arithmetic throughout, rounded half-even
to the micro-unit (`MICRO`); a run neither prices has no cost (NULL), never a zero.

Each process keeps the table in memory per policy version (a price edit bumps it), so a price
edit reaches every process within `POLICY_VERSION_CACHE_SECONDS`."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any, NamedTuple

from django.db import transaction
from django.db.models import Q

from orchestrator.models import PolicyState, Price, Run
from orchestrator.models.prices import MICRO, MONEY_MAX

MILLION = Decimal(1_000_000)
ZERO = Decimal(0)
REPRICE_TASK = "orchestrator.tasks.reprice"
# Runs priced again per UPDATE round.
REPRICE_BATCH = 1000


class Rate(NamedTuple):
    """One price row, as the arithmetic reads it: prices per token (a millionth of the row's
    prices per million, exact in decimals) and per call."""

    effective_from: datetime
    input: Decimal | None
    output: Decimal | None
    cached: Decimal | None
    per_call: Decimal | None
    currency: str


class Usage(NamedTuple):
    """What a run consumed, as far as its price depends on it."""

    model: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    source: str = ""
    calls: int = 1


def _per_token(price: Decimal | None) -> Decimal | None:
    return None if price is None else price / MILLION


class PriceTable:
    """The price rows by kind and name, each list in effective order, for lookups by time."""

    def __init__(self, rows: Iterable[Price | Any]) -> None:
        by: dict[tuple[str, str], list[Rate]] = {}
        for row in rows:
            cached = row.cached_per_million
            rate = Rate(
                row.effective_from,
                _per_token(row.input_per_million),
                _per_token(row.output_per_million),
                _per_token(row.input_per_million if cached is None else cached),
                row.per_call,
                row.currency,
            )
            by.setdefault((row.kind, row.name), []).append(rate)
        # {name: (starts, rates)} per kind: one dict lookup per run and kind.
        self._models: dict[str, tuple[list[datetime], list[Rate]]] = {}
        self._calls: dict[str, tuple[list[datetime], list[Rate]]] = {}
        for (kind, name), rates in by.items():
            rates.sort(key=lambda rate: rate.effective_from)
            table = self._models if kind == Price.Kind.MODEL else self._calls
            table[name] = ([rate.effective_from for rate in rates], rates)

    def __bool__(self) -> bool:
        return bool(self._models or self._calls)

    def rate(self, kind: str, name: str, at: datetime) -> Rate | None:
        """The row of `kind` and `name` in effect at `at`: the latest starting at or before it."""
        return _rate(self._models if kind == Price.Kind.MODEL else self._calls, name, at)

    def price(self, usage: Usage, at: datetime) -> tuple[Decimal, str] | None:
        """The cost of `usage` at time `at` and its currency; None when no row prices it."""
        return self.cost(*usage, at)

    def cost(
        self,
        model: str,
        input_tokens: int | None,
        output_tokens: int | None,
        cached_tokens: int | None,
        source: str,
        calls: int,
        at: datetime,
    ) -> tuple[Decimal, str] | None:
        """`price` of the usage's fields as they are (the ingest path: no tuple built)."""
        amount: Decimal | None = None
        currency = ""
        if model and (input_tokens is not None or output_tokens is not None):
            rate = _rate(self._models, model, at)
            if rate is not None:
                amount, currency = token_cost(rate, input_tokens, output_tokens, cached_tokens)
        if source:
            rate = _rate(self._calls, source, at)
            if rate is not None and rate.per_call is not None:
                if amount is None:
                    amount, currency = rate.per_call * max(calls, 1), rate.currency
                elif rate.currency == currency:
                    amount += rate.per_call * max(calls, 1)
        if amount is None:
            return None
        amount = amount.quantize(MICRO, rounding=ROUND_HALF_EVEN)
        return (amount, currency) if amount <= MONEY_MAX else None


def _rate(
    table: dict[str, tuple[list[datetime], list[Rate]]], name: str, at: datetime
) -> Rate | None:
    found = table.get(name)
    if found is None:
        return None
    starts, rates = found
    if len(starts) == 1:  # most names have one row
        return rates[0] if starts[0] <= at else None
    i = bisect.bisect_right(starts, at) - 1
    return rates[i] if i >= 0 else None


def token_cost(
    rate: Rate, input_tokens: int | None, output_tokens: int | None, cached_tokens: int | None
) -> tuple[Decimal, str]:
    """The tokens' cost, unrounded, and its currency: input tokens include the cached ones."""
    given = input_tokens or 0
    cached = min(cached_tokens or 0, given)
    total = ZERO
    if rate.input is not None:
        total += (given - cached) * rate.input
    if rate.cached is not None:
        total += cached * rate.cached
    if rate.output is not None and output_tokens:
        total += output_tokens * rate.output
    return total, rate.currency


_lock = threading.Lock()
_tables: dict[int, PriceTable] = {}


def current() -> PriceTable:
    """The price table of the policy version announced lately (read once per version)."""
    version = PolicyState.announced_version()
    found = _tables.get(version)
    if found is None:
        found = PriceTable(Price.objects.all())
        with _lock:
            _tables.clear()
            _tables[version] = found
    return found


def forget() -> None:
    """Drop the remembered table: a price edit in this process reads it again."""
    with _lock:
        _tables.clear()


def cost_fields(
    usage: Usage, at: datetime, reported: tuple[Decimal, str] | None = None
) -> dict[str, Any]:
    """The cost columns of a run: as reported, else priced, else none."""
    return dict(zip(COST_COLUMNS, cost_values(usage, at, reported), strict=True))


def usage_fields(run: Run, usage: Any, calls: int, finished_at: datetime) -> dict[str, Any]:
    """The usage columns of an envelope's `usage` (what is not a count left out) and the cost of
    `calls` calls of `run`'s source with it, priced at the run's start: what
    `Run.record_outcome` stores beside the outcome of a built-in coordinator's run."""
    usage = usage if isinstance(usage, dict) else {}
    counts: dict[str, int | None] = {}
    for name in ("input_tokens", "output_tokens", "cached_tokens"):
        value = usage.get(name)
        whole = isinstance(value, int) and not isinstance(value, bool)
        counts[name] = value if whole and 0 <= value < 2**63 else None
    model = usage.get("model") if isinstance(usage.get("model"), str) else ""
    used = Usage(model[:200], **counts, source=run.source, calls=calls or 1)
    start = run.started_at or finished_at
    return {**counts, "model": used.model, **cost_fields(used, start)}


COST_COLUMNS = ("cost", "cost_currency", "cost_source")
NO_COST = (None, "USD", "")


def cost_values(
    usage: Usage, at: datetime, reported: tuple[Decimal, str] | None = None
) -> tuple[Decimal | None, str, str]:
    """`cost_fields`' values, in `COST_COLUMNS`' order."""
    if reported is not None:
        return reported[0], reported[1], Run.CostSource.REPORTED
    table = current()
    priced = table.cost(*usage, at) if table else None
    return NO_COST if priced is None else (priced[0], priced[1], Run.CostSource.PRICED)


# Repricing -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Window:
    """The runs a price edit changes: of one kind and name, started in [since, until)."""

    kind: str
    name: str
    since: datetime
    until: datetime | None = None

    def as_args(self) -> list[Any]:
        until = self.until.isoformat() if self.until else None
        return [self.kind, self.name, self.since.isoformat(), until]

    @classmethod
    def from_args(cls, kind: str, name: str, since: str, until: str | None) -> Window:
        end = datetime.fromisoformat(until) if until else None
        return cls(kind, name, datetime.fromisoformat(since), end)


def window_of_change(
    kind: str, name: str, before: datetime | None, after: datetime | None
) -> Window:
    """The window an edit of the row of `kind` and `name` starting at `before` (None: a new
    row) to one starting at `after` (None: deleted) changes: from the earlier start to the next
    row's start after the later one (open if none)."""
    starts = [s for s in (before, after) if s is not None]
    since, last = min(starts), max(starts)
    nxt = (
        Price.objects.filter(kind=kind, name=name, effective_from__gt=last)
        .order_by("effective_from")
        .values_list("effective_from", flat=True)
        .first()
    )
    return Window(kind, name, since, nxt)


def runs_in(window: Window) -> Any:
    """The runs whose cost `window`'s rows decide: started in it (created, when no start),
    priced or without a cost (a reported cost is the agent's word, never replaced)."""
    started = Q(started_at__gte=window.since)
    created = Q(started_at__isnull=True, created_at__gte=window.since)
    if window.until is not None:
        started &= Q(started_at__lt=window.until)
        created &= Q(created_at__lt=window.until)
    runs = Run.objects.filter(started | created).exclude(cost_source=Run.CostSource.REPORTED)
    if window.kind == Price.Kind.MODEL:
        tokens = Q(input_tokens__isnull=False) | Q(output_tokens__isnull=False)
        return runs.filter(tokens, model=window.name)
    return runs.filter(source=window.name)


def reprice(window: Window, batch: int = REPRICE_BATCH) -> int:
    """Price again, at the table as it is now, every run `window` covers; return how many runs'
    costs changed. Idempotent: a second pass changes nothing."""
    forget()
    table = PriceTable(Price.objects.all())
    fields = ["cost", "cost_currency", "cost_source"]
    columns = ["pk", "created_at", "started_at", "model", "input_tokens", "output_tokens"]
    columns += ["cached_tokens", "source", "calls", *fields]
    changed = 0
    last = 0
    while True:
        rows = list(runs_in(window).filter(pk__gt=last).order_by("pk").values(*columns)[:batch])
        if not rows:
            return changed
        last = rows[-1]["pk"]
        updates = []
        for row in rows:
            usage = Usage(
                row["model"],
                row["input_tokens"],
                row["output_tokens"],
                row["cached_tokens"],
                row["source"],
                row["calls"] or 1,
            )
            priced = table.price(usage, row["started_at"] or row["created_at"])
            new = (None, "USD", "") if priced is None else (*priced, Run.CostSource.PRICED)
            if (row["cost"], row["cost_currency"], row["cost_source"]) != new:
                run = Run(pk=row["pk"], created_at=row["created_at"])
                run.cost, run.cost_currency, run.cost_source = new
                updates.append(run)
        if updates:
            with transaction.atomic():
                Run.objects.bulk_update(updates, fields)
            changed += len(updates)
