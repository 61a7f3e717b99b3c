"""What a run consumed and cost, as agents report it (`usage`, `cost`) and as the API answers it.
Limits match the run's columns: tokens in a bigint, amounts to the micro-unit below 10^8."""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from typing import Annotated, Any

from ninja import Schema
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

from orchestrator.models import Run
from orchestrator.models.prices import MICRO, MONEY_MAX
from orchestrator.schemas.common import BIGINT_MAX, Str200

Tokens = Annotated[int, Field(ge=0, le=BIGINT_MAX)]


class UsageIn(BaseModel):
    """Tokens a run used and the model that answered. `input_tokens` counts the cached ones
    (OpenAI's `prompt_tokens` and OpenTelemetry's `gen_ai.usage.input_tokens` do); each is also
    read under its OpenAI name (`prompt_tokens`, `completion_tokens`) and `cached_tokens` under
    Anthropic's `cache_read_input_tokens`."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    input_tokens: Tokens | None = Field(
        None,
        validation_alias=AliasChoices("input_tokens", "inputTokens", "prompt_tokens"),
        description="Input (prompt) tokens, the cached ones included",
    )
    output_tokens: Tokens | None = Field(
        None,
        validation_alias=AliasChoices("output_tokens", "outputTokens", "completion_tokens"),
        description="Output (completion) tokens",
    )
    cached_tokens: Tokens | None = Field(
        None,
        validation_alias=AliasChoices("cached_tokens", "cachedTokens", "cache_read_input_tokens"),
        description="Input tokens read from the provider's prompt cache",
    )
    model: Str200 = Field("", description="The model that answered (else the one asked for)")


class CostIn(BaseModel):
    """What a run cost, as the agent knows it: a decimal amount (a string keeps every digit; a
    number is read through its shortest decimal form), rounded half-even to the micro-unit, and
    an ISO 4217 currency. A bare number or string is an amount in USD."""

    model_config = ConfigDict(extra="forbid")

    amount: Decimal = Field(
        ge=0, le=MONEY_MAX, allow_inf_nan=False, description="≥ 0, below 100,000,000"
    )
    currency: str = Field(
        "USD", pattern=r"^[A-Z]{3}$", description="ISO 4217: three letters (read upper-case)"
    )

    @model_validator(mode="before")
    @classmethod
    def _bare_amount(cls, data: Any) -> Any:
        if isinstance(data, str | int | float) and not isinstance(data, bool):
            return {"amount": data}
        return data

    @field_validator("currency", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("amount")
    @classmethod
    def _to_micro(cls, value: Decimal) -> Decimal:
        value = value.quantize(MICRO, rounding=ROUND_HALF_EVEN) + 0  # + 0: no negative zero
        if value > MONEY_MAX:
            raise ValueError(f"must be at most {MONEY_MAX}")
        return value


class UsageOut(Schema):
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    model: str


class CostOut(Schema):
    amount: str = Field(description="A decimal string, to the micro-unit (6 places)")
    currency: str
    source: str = Field(
        description="reported (by the agent) or priced (from the price table at the run's start)"
    )


def usage_out(run: Run) -> dict[str, Any] | None:
    """A run's `usage` in the API's answer (null when it reported none)."""
    counts = (run.input_tokens, run.output_tokens, run.cached_tokens)
    if not run.model and all(n is None for n in counts):
        return None
    return {
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "cached_tokens": run.cached_tokens,
        "model": run.model,
    }


def cost_out(run: Run) -> dict[str, Any] | None:
    """A run's `cost` in the API's answer (null when neither reported nor priced)."""
    if run.cost is None:
        return None
    amount = Decimal(run.cost).quantize(MICRO)
    return {"amount": str(amount), "currency": run.cost_currency, "source": run.cost_source}
