"""Judging the evidence: the verdict on each exception of a chain, and the one that decides.
Here: how strong each kind of evidence is, `judge` (the core rules' verdict on one node: a
specific code (a provider's; a protocol family's, such as a TLS reason or an AMQP reply code; a
SQLSTATE), the status, a generic provider code, the class, the class name, the message, a broad
class), and `decide` (registered overrides over the whole chain first, then the strongest
verdict, wherever it sits: httpx's ConnectError around a certificate that failed verification is
an auth failure, the inner reason being a code and the outer class only a class; between equals
the outer exception wins, except that a generic TRANSIENT yields to a more specific verdict
inside it: requests' ConnectionError wrapping urllib3's ReadTimeoutError is a timeout). Not here:
reading the evidence (`classifier.signals`), the tables themselves (`classifier.rules`,
`classifier.protocols`), and what a verdict makes of retryable, delay and detail
(`classifier.failure`).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final, NamedTuple

from classifier import protocols, rules
from classifier.overrides import MatchOn, OverrideRule, Overrides
from classifier.signals import Node
from classifier.taxonomy import FailureCategory, Signal


class Strength(IntEnum):
    """How much a verdict's evidence weighs when verdicts of one chain are compared."""

    NONE = 0
    FALLBACK_TYPE = 1  # a broad class (a database OperationalError), weaker than the message
    MESSAGE = 2
    CLASS_NAME = 3  # a telling name of a class no table knows
    TYPE = 4  # a known class in the MRO
    PROVIDER_CODE = 5
    STATUS = 6  # an HTTP or gRPC status, or a provider code that came with one


class Verdict(NamedTuple):
    """A category with the evidence behind it; `node` is None when nothing spoke."""

    strength: Strength
    category: FailureCategory
    signal: Signal
    code: str | None = None  # the provider code, gRPC status or SQLSTATE that decided
    node: Node | None = None
    rule: OverrideRule | None = None  # the override that decided, if one did


NO_VERDICT: Final = Verdict(Strength.NONE, FailureCategory.UNCLASSIFIED, Signal.NONE)
_SIGNAL_OF_MATCH: Final = {
    MatchOn.PROVIDER_CODE: Signal.PROVIDER_CODE,
    MatchOn.EXCEPTION_TYPE: Signal.TYPE,
    MatchOn.STATUS_CODE: Signal.STATUS,
}


def decide(nodes: list[Node], overrides: Overrides, provider: str | None) -> Verdict:
    """Return the deciding verdict over a chain (outermost first): overrides, then core rules.

    The message is the least trusted evidence: messages are read only when nothing stronger
    than a message spoke anywhere in the chain (a message cannot beat stronger evidence, so
    reading them then would change nothing).
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

    Stronger evidence wins. Between equals the outer exception keeps its say, unless it said
    TRANSIENT (the vaguest category a signal gives) and the inner one says something else.
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
    """Return the core rules' verdict on one node, from its strongest evidence.

    With `read_message` False the message is skipped (the broad class, if any, speaks instead).
    """
    grpc_category = rules.GRPC_STATUS.get(node.grpc) if node.grpc else None
    status_category = rules.status_category(node.status) if node.status is not None else None
    # A specific provider code refines the status it came with (AWS sends throttling as a 400,
    # OpenAI an exhausted balance as a 429) and keeps the status's strength in the chain.
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
    """Return the verdict of the first code a table knows, else of the SQLSTATE.

    A class that keeps a protocol family's code (a TLS reason, a MySQL error number, an AMQP,
    SMTP or FTP reply code) has its codes read by that family's table first: 404 from a broker
    is AMQP's not-found, and 1049 from MySQL an unknown database, whatever SQLSTATE came along.
    """
    source = node.kind.code_source
    for code in node.codes:
        category = protocols.code_category(source.family, code) if source else None
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
    """Return the verdict of the class, its name, the message, or a broad class, in that order."""
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
