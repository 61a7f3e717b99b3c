"""Judging the evidence: the verdict on each exception of a chain, and the one that decides
(overrides first, then the strongest evidence wherever it sits in the chain)."""

from __future__ import annotations

from enum import IntEnum
from typing import Final, NamedTuple

from classifier import protocols, rules
from classifier.overrides import MatchOn, OverrideRule, Overrides
from classifier.signals import Node
from classifier.taxonomy import FailureCategory, Signal


class Strength(IntEnum):
    NONE = 0
    FALLBACK_TYPE = 1  # a broad class (a database OperationalError), weaker than the message
    MESSAGE = 2
    CLASS_NAME = 3  # a telling name of a class no table knows
    TYPE = 4
    PROVIDER_CODE = 5
    STATUS = 6  # an HTTP or gRPC status, or a provider code that came with one


class Verdict(NamedTuple):
    strength: Strength
    category: FailureCategory
    signal: Signal
    code: str | None = None
    node: Node | None = None
    rule: OverrideRule | None = None


NO_VERDICT: Final = Verdict(Strength.NONE, FailureCategory.UNCLASSIFIED, Signal.NONE)
_SIGNAL_OF_MATCH: Final = {
    MatchOn.PROVIDER_CODE: Signal.PROVIDER_CODE,
    MatchOn.EXCEPTION_TYPE: Signal.TYPE,
    MatchOn.STATUS_CODE: Signal.STATUS,
}


def decide(nodes: list[Node], overrides: Overrides, provider: str | None) -> Verdict:
    """Return the deciding verdict over a chain (outermost first): overrides, then core rules.

    Messages are read only when nothing stronger spoke anywhere in the chain.
    """
    if overrides:
        for node in nodes:
            verdict = override_verdict(node, overrides, provider)
            if verdict is not None:
                return verdict
    verdict = strongest([judge(node, read_message=False) for node in nodes])
    if verdict.strength > Strength.MESSAGE:
        return verdict
    return strongest([judge(node) for node in nodes])


def strongest(verdicts: list[Verdict]) -> Verdict:
    """Return the verdict that wins among those of a chain, outermost first."""
    best = NO_VERDICT
    for verdict in verdicts:
        if _beats(verdict, best):
            best = verdict
    return best


def _beats(verdict: Verdict, held: Verdict) -> bool:
    """Return whether an inner `verdict` replaces the `held` one of an outer exception.

    Between equals the outer one keeps its say, unless it said only TRANSIENT.
    """
    if verdict.strength != held.strength:
        return verdict.strength > held.strength
    transient = FailureCategory.TRANSIENT
    return held.category is transient and verdict.category is not transient


def override_verdict(node: Node, overrides: Overrides, provider: str | None) -> Verdict | None:
    """Return the verdict of the registered override matching `node`, or None."""
    codes = [*node.codes, *(code for code in (node.grpc, node.sqlstate) if code)]
    rule = overrides.find(provider, codes=codes, type_names=node.kind.names, status=node.status)
    if rule is None:
        return None
    signal = _SIGNAL_OF_MATCH[rule.match_on]
    code = rule.match_value if signal is Signal.PROVIDER_CODE else None
    return Verdict(Strength.STATUS, rule.failure_type, signal, code, node, rule)


def judge(node: Node, *, read_message: bool = True) -> Verdict:
    """Return the core rules' verdict on one node, from its strongest evidence."""
    grpc_category = rules.GRPC_STATUS.get(node.grpc) if node.grpc else None
    status_category = rules.status_category(node.status) if node.status is not None else None
    # AWS sends throttling as a 400: a specific code refines the status and keeps its strength.
    with_status = grpc_category is not None or status_category is not None
    verdict = _specific_code(node, Strength.STATUS if with_status else Strength.PROVIDER_CODE)
    if verdict is not None:
        return verdict
    if grpc_category is not None:
        return Verdict(Strength.STATUS, grpc_category, Signal.STATUS, node.grpc, node)
    if status_category is not None:
        return Verdict(Strength.STATUS, status_category, Signal.STATUS, None, node)
    for code in node.codes:  # too generic to beat a status: used only without one
        category = rules.generic_code_category(code)
        if category is not None:
            return Verdict(Strength.PROVIDER_CODE, category, Signal.PROVIDER_CODE, code, node)
    return _class_or_message(node, read_message)


def _specific_code(node: Node, strength: Strength) -> Verdict | None:
    """Return the verdict of the first code a table knows (the class's protocol family's table
    first), else of the SQLSTATE."""
    source = node.kind.code_source
    for code in node.codes:
        category = protocols.code_category(source.family, code, node.message) if source else None
        if category is None:
            category = rules.provider_code_category(code)
        if category is not None:
            return Verdict(strength, category, Signal.PROVIDER_CODE, code, node)
    if node.sqlstate:
        category = rules.sqlstate_category(node.sqlstate)
        if category is not None:
            return Verdict(strength, category, Signal.PROVIDER_CODE, node.sqlstate, node)
    return None


def _class_or_message(node: Node, read_message: bool) -> Verdict:
    kind = node.kind
    if kind.category is not None:
        return Verdict(Strength.TYPE, kind.category, Signal.TYPE, None, node)
    if kind.name_category is not None:
        return Verdict(Strength.CLASS_NAME, kind.name_category, Signal.TYPE, None, node)
    category = rules.message_category(node.message) if read_message else None
    if category is not None:
        return Verdict(Strength.MESSAGE, category, Signal.MESSAGE, None, node)
    if kind.fallback is not None:
        return Verdict(Strength.FALLBACK_TYPE, kind.fallback, Signal.TYPE, None, node)
    return NO_VERDICT
