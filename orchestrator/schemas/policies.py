"""The schemas of the policies routes: the routing table and overrides, their versions, dry runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from ninja import Schema
from pydantic import (
    ConfigDict,
    Field,
)

from classifier import FailureCategory
from orchestrator.vocabulary import Action


class PolicyOut(Schema):
    failure_type: FailureCategory
    max_attempts: int
    base_delay: float
    max_delay: float
    multiplier: float
    jitter: str
    action_when_exhausted: str
    hard_fail: bool
    review_deadline: int
    review_fallback: str
    over_budget_action: str = Field(
        "escalate",
        description="What a failure gets instead of a retry, a wait or a switch once its source "
        "or its agent is past its daily spend budget: escalate or abort",
    )
    refresh_credentials: bool = Field(
        False,
        description="An auth failure whose caller can refresh its credentials is refreshed, "
        "then retried once, before anything else",
    )


class OverrideOut(Schema):
    provider: str
    match_on: str
    match_value: str
    failure_type: FailureCategory
    retryable: bool | None
    note: str
    enabled: bool


class ScrubRuleOut(Schema):
    kind: str = Field(description="key, pattern or safe_field")
    value: str
    note: str
    enabled: bool


class PoliciesOut(Schema):
    version: int
    policies: list[PolicyOut]
    overrides: list[OverrideOut] = Field(description="Enabled provider overrides only")
    scrub_rules: list[ScrubRuleOut] = Field(
        description="Enabled scrub rules only: the operators' secret filters on top of the "
        "built-in ones, which the server applies to every report and the Python client before "
        "it sends one"
    )


class PolicyRowIn(Schema):
    """One failure type's proposed row: the fields given replace the current row's."""

    model_config = ConfigDict(extra="forbid")

    failure_type: FailureCategory
    max_attempts: int | None = None
    base_delay: float | None = None
    max_delay: float | None = None
    multiplier: float | None = None
    jitter: Literal["full", "equal", "none"] | None = None
    action_when_exhausted: Action | None = None
    hard_fail: bool | None = None
    review_deadline: int | None = None
    review_fallback: Action | None = None
    over_budget_action: Literal["escalate", "abort"] | None = None
    refresh_credentials: bool | None = None

    def given(self) -> dict[str, Any]:
        row = self.model_dump(exclude_none=True, mode="json")
        return row


class DryRunIn(Schema):
    model_config = ConfigDict(extra="forbid")

    days: float = Field(7, gt=0, le=90, description="Days of stored failures to replay")
    policies: list[PolicyRowIn] = Field(
        default_factory=list, max_length=20, description="Rows over the current table"
    )


class FiguresOut(Schema):
    failures: float
    retries: float
    waiting_seconds: float = Field(description="Expected seconds spent waiting before retries")
    switches: float
    escalations: float
    escalations_per_day: float = Field(description="Review load: escalations per day")
    aborts: float
    accepted_partial: float
    expected_wasted_calls: float = Field(
        description="Retries and switches expected to fail, from what followed recorded ones"
    )
    expected_recovered: float = Field(description="Runs expected to succeed after the decision")
    by_failure_type: dict[str, dict[str, float]]


class DryRunOut(Schema):
    since: datetime
    until: datetime
    days: float
    failures: int = Field(description="Failures in the window")
    sampled: bool = Field(description="True when a sample was replayed and the figures scaled")
    sample_size: int
    evidence: dict[str, int] = Field(description="Recorded retries and switches behind the rates")
    current_version: int
    current: FiguresOut
    proposed: FiguresOut
    difference: dict[str, float] = Field(description="Proposed minus current")


class PolicyChangeOut(Schema):
    what: str
    before: Any = None
    after: Any = None


class PolicyVersionOut(Schema):
    version: int
    created_at: datetime
    actor: str
    note: str
    restored_from: int | None
    policies: list[PolicyOut]
    overrides: list[OverrideOut] = Field(description="Every override of the version")
    scrub_rules: list[ScrubRuleOut] = Field(description="Every scrub rule of the version")
    changes: list[PolicyChangeOut] = Field(description="What differs from the version before")


class PolicyVersionListOut(Schema):
    items: list[PolicyVersionOut]
    next_before: int | None = Field(description="Pass as `before` for the older versions")
