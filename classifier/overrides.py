"""Provider-specific rules registered by callers and consulted before the core rules: one signal
(an exception type, a status code or a provider code), for one provider or all, onto a category."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from classifier.taxonomy import FailureCategory


class MatchOn(StrEnum):
    EXCEPTION_TYPE = "exception_type"
    STATUS_CODE = "status_code"
    PROVIDER_CODE = "provider_code"


@dataclass(frozen=True, slots=True)
class OverrideRule:
    """One override row: `provider` "" applies to every provider; a trailing "*" makes
    `match_value` a prefix; provider codes compare case-insensitively."""

    match_on: MatchOn
    match_value: str
    failure_type: FailureCategory
    retryable: bool | None = None
    provider: str = ""
    enabled: bool = True


class Overrides:
    """A registry of override rules; later rules replace earlier equal keys. The most specific
    evidence is looked up first, rules scoped to the provider before global ones."""

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
        """Return a registry filled from plain rows; an invalid row raises ValueError when
        `strict`, else it is listed in `rejected` with why."""
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

    def only_statuses(self) -> frozenset[int] | None:
        """Return the status codes the rules match when they match nothing else, else None."""
        if self._prefixes or any(on is not MatchOn.STATUS_CODE for on, _, _ in self._exact):
            return None
        return frozenset(value for _, _, value in self._exact)

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
    return (provider or "").strip().casefold()
