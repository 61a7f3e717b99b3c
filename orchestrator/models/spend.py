"""Spend budgets: a daily limit in money per source or per agent. Past it, routing answers a
failure there with the routing policy's `over_budget_action` (escalate or abort) instead of a call
that would spend more (`orchestrator.coordination.spend`); an alert rule of kind `spend_budget`
fires. Operators edit them in the admin, each change audited."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from orchestrator.models.prices import CURRENCY, MONEY_DIGITS, MONEY_PLACES


class SpendBudget(models.Model):
    """At most `daily_limit` (in `currency`) spent per UTC day by one source's or agent's runs."""

    class Scope(models.TextChoices):
        SOURCE = "source", "source"
        AGENT = "agent", "agent"

    scope = models.CharField(max_length=10, choices=Scope.choices)
    name = models.CharField(max_length=100, help_text="The source's or the agent's name")
    daily_limit = models.DecimalField(
        max_digits=MONEY_DIGITS,
        decimal_places=MONEY_PLACES,
        validators=[MinValueValidator(Decimal(0))],
        help_text="Spend allowed per UTC day (the runs created since midnight UTC)",
    )
    currency = models.CharField(max_length=3, default="USD", validators=[CURRENCY])
    enabled = models.BooleanField(default=True)
    note = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["scope", "name"]
        constraints = [
            models.UniqueConstraint(fields=["scope", "name"], name="spendbudget_unique_name")
        ]

    def __str__(self) -> str:
        return f"{self.scope} {self.name}: {self.daily_limit} {self.currency} a day"

    def snapshot(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "name": self.name,
            "daily_limit": str(
                Decimal(self.daily_limit).quantize(Decimal(1).scaleb(-MONEY_PLACES))
            ),
            "currency": self.currency,
            "enabled": self.enabled,
            "note": self.note,
        }
