"""Provider-specific rules registered by callers and consulted before the core rules. An
override maps one signal (an exception type name, a status code or a provider code), for one
provider or for all, onto a category and optionally a retryable flag. This is how 498 "token
expired", 420 "enhance your calm" or an SDK's private error names reach the taxonomy without
editing `classifier.rules`. Here: the rule rows and the registry that finds the rule matching
one exception's signals. Not here: when overrides are consulted (first, over the whole chain:
`classifier.judge.decide`) and where the rows come from (the orchestrator's policy snapshot).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from classifier.taxonomy import FailureCategory


class MatchOn(StrEnum):
    """Which signal an override matches."""

    EXCEPTION_TYPE = "exception_type"
    STATUS_CODE = "status_code"
    PROVIDER_CODE = "provider_code"


@dataclass(frozen=True, slots=True)
class OverrideRule:
    """One override row: `provider` "" applies to every provider.

    `match_value` is a "module.QualName", a "package.QualName" or a bare class name for
    EXCEPTION_TYPE (matched anywhere in the MRO), a number for STATUS_CODE, a code for
    PROVIDER_CODE (compared case-insensitively). A trailing "*" makes a type or code a prefix.
    """

    match_on: MatchOn
    match_value: str
    failure_type: FailureCategory
    retryable: bool | None = None
    provider: str = ""
    enabled: bool = True


class Overrides:
    """An explicitly filled registry of override rules; later rules replace earlier equal keys.

    Lookup order for one exception: provider code, exception type, status code (the most specific
    evidence first), each trying rules scoped to the current provider before global ones.
    """

    def __init__(self, rules: Iterable[OverrideRule | Mapping[str, Any]] = ()) -> None:
        self._exact: dict[tuple[MatchOn, str, Any], OverrideRule] = {}
        self._prefixes: list[tuple[MatchOn, str, str, OverrideRule]] = []
        self.rejected: list[tuple[Any, str]] = []
        for rule in rules:
            if isinstance(rule, OverrideRule):
                self.add_rule(rule)
            else:
                self._add_row(rule, strict=True)

    @classmethod
    def from_data(cls, rows: Iterable[Any], *, strict: bool = False) -> Overrides:
        """Return a registry filled from plain rows, as `ProviderOverride.snapshot()` writes them.

        Rows look like {"provider": "" or name, "match_on": "exception_type" | "status_code" |
        "provider_code", "match_value": str, "failure_type": str, "retryable": bool | None,
        "enabled": bool}; extra keys are ignored. Disabled rows are skipped. An invalid row
        raises ValueError when `strict`, else it is skipped and listed in `rejected` with why.
        """
        registry = cls()
        for row in rows:
            registry._add_row(row, strict=strict)
        return registry

    def add(
        self,
        match_on: MatchOn | str,
        match_value: str | int,
        failure_type: FailureCategory | str,
        *,
        retryable: bool | None = None,
        provider: str = "",
    ) -> OverrideRule:
        """Register one rule and return it; raise ValueError if it is malformed."""
        rule = OverrideRule(
            match_on=MatchOn(match_on),
            match_value=str(match_value).strip(),
            failure_type=FailureCategory(failure_type),
            retryable=retryable,
            provider=provider.strip(),
        )
        self.add_rule(rule)
        return rule

    def add_rule(self, rule: OverrideRule) -> None:
        """Register `rule` (a disabled rule is ignored); raise ValueError if it is malformed."""
        if not rule.enabled:
            return
        if rule.retryable is not None and not isinstance(rule.retryable, bool):
            raise ValueError("retryable must be true, false or null")
        provider = _provider_key(rule.provider)
        value = rule.match_value.strip()
        if not value:
            raise ValueError("match_value is empty")
        if rule.match_on is MatchOn.STATUS_CODE:
            if not value.isdigit() or not 100 <= int(value) <= 599:
                raise ValueError(f"status code {value!r} is not a number between 100 and 599")
            self._exact[(rule.match_on, provider, int(value))] = rule
            return
        if rule.match_on is MatchOn.PROVIDER_CODE:
            value = value.casefold()
        if value.endswith("*") and len(value) > 1:
            self._prefixes.append((rule.match_on, provider, value[:-1], rule))
        else:
            self._exact[(rule.match_on, provider, value)] = rule

    def __len__(self) -> int:
        return len(self._exact) + len(self._prefixes)

    def __repr__(self) -> str:
        return f"Overrides({len(self)} rules)"

    def find(
        self,
        provider: str | None,
        *,
        codes: Iterable[str] = (),
        type_names: Iterable[str] = (),
        status: int | None = None,
    ) -> OverrideRule | None:
        """Return the rule matching these signals for `provider`, or None if no rule does."""
        if not self:
            return None
        scopes = ("", _provider_key(provider)) if provider else ("",)
        folded = [code.casefold() for code in codes]
        for match_on, values in (
            (MatchOn.PROVIDER_CODE, folded),
            (MatchOn.EXCEPTION_TYPE, list(type_names)),
        ):
            for scope in reversed(scopes):
                rule = self._find_text(match_on, scope, values)
                if rule is not None:
                    return rule
        if status is not None:
            for scope in reversed(scopes):
                rule = self._exact.get((MatchOn.STATUS_CODE, scope, status))
                if rule is not None:
                    return rule
        return None

    def _find_text(self, match_on: MatchOn, scope: str, values: list[str]) -> OverrideRule | None:
        """Return the first exact, then prefix rule of `match_on` in `scope` matching a value."""
        for value in values:
            rule = self._exact.get((match_on, scope, value))
            if rule is not None:
                return rule
        for rule_on, rule_scope, prefix, rule in self._prefixes:
            if rule_on is match_on and rule_scope == scope:
                for value in values:
                    if value.startswith(prefix):
                        return rule
        return None

    def _add_row(self, row: Any, *, strict: bool) -> None:
        """Register one plain-data row, or reject it (raise when `strict`)."""
        try:
            if not isinstance(row, Mapping):
                raise ValueError("a row is a mapping")
            retryable = row.get("retryable")
            if retryable is not None and not isinstance(retryable, bool):
                raise ValueError("retryable must be true, false or null")
            self.add_rule(
                OverrideRule(
                    match_on=MatchOn(row.get("match_on")),
                    match_value=str(row.get("match_value", "")).strip(),
                    failure_type=FailureCategory(row.get("failure_type")),
                    retryable=retryable,
                    provider=str(row.get("provider") or ""),
                    enabled=bool(row.get("enabled", True)),
                )
            )
        except (ValueError, TypeError) as exc:
            if strict:
                raise ValueError(f"invalid override row {row!r}: {exc}") from exc
            self.rejected.append((row, str(exc)))


def _provider_key(provider: str | None) -> str:
    """Return the comparable form of a provider name ("" for none)."""
    return (provider or "").strip().casefold()
