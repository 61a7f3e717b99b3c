"""Spend budgets in money: what each budgeted source or agent has spent today (UTC), whether a
decision there is past its limit (`budget.decide` asks `over_budget` before routing), and the
audited changes operators make in the admin.

Only a source or an agent with an enabled budget costs a query: the budgets are read once per
SPEND_BUDGET_CACHE_SECONDS per process, and each one's spend today is one indexed sum
((source|agent, created_at)) remembered as long."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from orchestrator.memo import LocalMemo
from orchestrator.models import AuditEntry, Run
from orchestrator.models.spend import SpendBudget

ZERO = Decimal(0)
MICRO = Decimal("0.000001")
_BUDGETS: LocalMemo[list[dict[str, Any]]] = LocalMemo(
    lambda: settings.SPEND_BUDGET_CACHE_SECONDS, size=1
)
_SPENT: LocalMemo[Decimal] = LocalMemo(lambda: settings.SPEND_BUDGET_CACHE_SECONDS)


def day_start(now: datetime) -> datetime:
    """Midnight UTC of `now`'s day: a daily limit counts the runs created since."""
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


def budgets() -> list[dict[str, Any]]:
    """The enabled budgets (snapshots), remembered per process a few seconds."""
    return _BUDGETS.get(
        "all", lambda: [b.snapshot() for b in SpendBudget.objects.filter(enabled=True)]
    )


def forget() -> None:
    _BUDGETS.forget()
    _SPENT.forget()


def spent_today(scope: str, name: str, currency: str, now: datetime) -> Decimal:
    """The cost of `scope` `name`'s runs created since midnight UTC, in `currency`."""
    start = day_start(now)

    def load() -> Decimal:
        runs = Run.objects.filter(created_at__gte=start, cost_currency=currency, **{scope: name})
        total = runs.aggregate(s=Sum("cost"))["s"] or ZERO
        return total.quantize(MICRO)  # as PostgreSQL's numeric sum keeps it (SQLite's may not)

    return _SPENT.get((scope, name, currency, start), load)


@dataclass(frozen=True)
class BudgetState:
    scope: str
    name: str
    limit: Decimal
    currency: str
    spent: Decimal

    @property
    def over(self) -> bool:
        return self.spent >= self.limit

    @property
    def ratio(self) -> float:
        """Spent today over the limit (1: reached); a zero limit is reached at once (1)."""
        return float(self.spent / self.limit) if self.limit > 0 else 1.0

    @property
    def reason(self) -> str:
        return (
            f"{self.scope} {self.name} has spent {self.spent:.2f} {self.currency} today, "
            f"at or past its daily limit of {self.limit:.2f} {self.currency}"
        )


def states(now: datetime | None = None) -> list[BudgetState]:
    """Every enabled budget with its spend today."""
    now = now or timezone.now()
    return [
        BudgetState(
            b["scope"],
            b["name"],
            Decimal(b["daily_limit"]),
            b["currency"],
            spent_today(b["scope"], b["name"], b["currency"], now),
        )
        for b in budgets()
    ]


def over_budget(source: str, agent: str, now: datetime) -> str:
    """Why a failure of `agent` on `source` may spend no more today, or "" when it may."""
    wanted = {(SpendBudget.Scope.SOURCE, source), (SpendBudget.Scope.AGENT, agent)}
    for b in budgets():
        if (b["scope"], b["name"]) not in wanted:
            continue
        state = BudgetState(
            b["scope"],
            b["name"],
            Decimal(b["daily_limit"]),
            b["currency"],
            spent_today(b["scope"], b["name"], b["currency"], now),
        )
        if state.over:
            return state.reason
    return ""


# Changes, audited


def save_budget(obj: SpendBudget, actor: Any, note: str = "") -> SpendBudget:
    """Save a budget with its audit row (spendbudget.create or .update)."""
    with transaction.atomic():
        before = None
        if obj.pk:
            old = SpendBudget.objects.select_for_update().filter(pk=obj.pk).first()
            before = old.snapshot() if old else None
        obj.full_clean()
        obj.save()
        AuditEntry.record(
            actor=actor,
            action=f"spendbudget.{'update' if before else 'create'}",
            obj=obj,
            before=before,
            after=obj.snapshot(),
            note=note,
        )
    transaction.on_commit(forget)
    return obj


def delete_budget(obj: SpendBudget, actor: Any, note: str = "") -> None:
    with transaction.atomic():
        before, pk = obj.snapshot(), obj.pk
        obj.delete()
        obj.pk = pk
        AuditEntry.record(
            actor=actor, action="spendbudget.delete", obj=obj, before=before, after={}, note=note
        )
    transaction.on_commit(forget)
