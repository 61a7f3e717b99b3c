"""The price table: what a model's tokens and a source's calls cost, from an effective date on.

A run an agent reported tokens for without a cost is priced at ingest from the rows in effect at
the run's start (`orchestrator.pricing`); operators edit the rows in the admin, each edit a new
version of the policy with an audit row (`orchestrator.coordination.policy_changes`), and an edit
reaching into the past prices the runs of its window again (`orchestrator.pricing.reprice`)."""

from __future__ import annotations

from datetime import UTC
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

# Money: to the micro-unit (a millionth of a dollar), ample for a token's price.
MONEY_DIGITS = 14
MONEY_PLACES = 6
MICRO = Decimal("0.000001")
# The largest amount a money column holds (14 digits, 6 of them after the point).
MONEY_MAX = Decimal("99999999.999999")
CURRENCY = RegexValidator(r"^[A-Z]{3}\Z", "A currency is an ISO 4217 code: three capital letters.")


def money_field(**kwargs: Any) -> models.DecimalField:
    return models.DecimalField(
        max_digits=MONEY_DIGITS,
        decimal_places=MONEY_PLACES,
        validators=[MinValueValidator(Decimal(0))],
        **kwargs,
    )


class Price(models.Model):
    """One price from `effective_from` until the next row of the same kind and name: per million
    tokens of a model (input, output, cached input), or per call of a source."""

    class Kind(models.TextChoices):
        MODEL = "model", "model (per million tokens)"
        SOURCE_CALL = "source_call", "source call (per call)"

    kind = models.CharField(max_length=20, choices=Kind.choices)
    name = models.CharField(
        max_length=200, help_text="The model's name as agents report it, or the source's name"
    )
    effective_from = models.DateTimeField(
        default=timezone.now,
        help_text="Runs started from this time on (until the next row's) are priced by this row",
    )
    input_per_million = money_field(
        null=True, blank=True, help_text="Per million input tokens (a model)"
    )
    output_per_million = money_field(
        null=True, blank=True, help_text="Per million output tokens (a model)"
    )
    cached_per_million = money_field(
        null=True,
        blank=True,
        help_text="Per million cached input tokens (a model); blank: the input price",
    )
    per_call = money_field(null=True, blank=True, help_text="Per call (a source)")
    currency = models.CharField(max_length=3, default="USD", validators=[CURRENCY])
    note = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # What an edit sets on a row (kind, name and effective date name the row).
    VALUE_FIELDS = (
        "input_per_million",
        "output_per_million",
        "cached_per_million",
        "per_call",
        "currency",
        "note",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["kind", "name", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["kind", "name", "effective_from"], name="price_unique_effective"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} from {self.effective_from:%Y-%m-%d %H:%M}"

    def clean(self) -> None:
        token_prices = (self.input_per_million, self.output_per_million, self.cached_per_million)
        if self.kind == self.Kind.MODEL:
            if self.per_call is not None:
                raise ValidationError({"per_call": "A model is priced per token, not per call."})
            if self.input_per_million is None and self.output_per_million is None:
                raise ValidationError(
                    {"input_per_million": "A model's price needs an input or an output price."}
                )
        elif self.kind == self.Kind.SOURCE_CALL:
            if self.per_call is None:
                raise ValidationError({"per_call": "A source call's price needs a price per call."})
            if any(price is not None for price in token_prices):
                raise ValidationError(
                    {"input_per_million": "A source call is priced per call, not per token."}
                )

    def snapshot(self) -> dict[str, Any]:
        def text(value: Decimal | str | None) -> str | None:
            # As the column reads back, whatever the form or the caller gave (3.00 or "3").
            return None if value is None else str(Decimal(value).quantize(MICRO))

        return {
            "kind": self.kind,
            "name": self.name,
            "effective_from": self.effective_from.astimezone(UTC).isoformat()
            if self.effective_from
            else None,
            "input_per_million": text(self.input_per_million),
            "output_per_million": text(self.output_per_million),
            "cached_per_million": text(self.cached_per_million),
            "per_call": text(self.per_call),
            "currency": self.currency,
            "note": self.note,
        }
