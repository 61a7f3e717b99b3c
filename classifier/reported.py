"""Classifying a reported failure again: the exception an error envelope describes (its chain,
`exception_type`, `status_code`, `provider_code`), judged with a newer set of provider overrides
than the reporter classified it with. The reporter's own classification read the live exception,
so it stands unless the overrides changed what they say about this evidence."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from classifier.described import UNNAMED
from classifier.engine import Classifier
from classifier.failure import Failure, build_failure
from classifier.judge import Verdict, override_verdict
from classifier.overrides import Overrides
from classifier.signals import MAX_CHAIN, MESSAGE_LIMIT, Node, exception_class_named

# "module.QualName: message", as `Failure.chain` writes each exception.
_CHAIN_ENTRY: Final = re.compile(r"([A-Za-z_][\w.]{0,299})(?:: (.*))?", re.DOTALL)


def describes_exception(envelope: Mapping[str, Any]) -> bool:
    """Return whether an error envelope carries evidence of the exception it failed with."""
    return bool(
        envelope.get("exception_type")
        or envelope.get("chain")
        or envelope.get("provider_code")
        or envelope.get("status_code") is not None
    )


def envelope_nodes(envelope: Mapping[str, Any]) -> list[Node]:
    """Return the chain an error envelope describes, outermost first; its status and provider
    code sit on the exception named `exception_type` (the one whose evidence decided)."""
    nodes = []
    chain = envelope.get("chain")
    for entry in chain[:MAX_CHAIN] if isinstance(chain, list) else ():
        found = _CHAIN_ENTRY.fullmatch(entry) if isinstance(entry, str) else None
        name, message = (found.group(1), found.group(2) or "") if found else (UNNAMED, str(entry))
        nodes.append(Node(exception_class_named(name), message[:MESSAGE_LIMIT]))
    named = envelope.get("exception_type")
    named = named if isinstance(named, str) and named else None
    if not nodes:
        detail = envelope.get("detail")
        message = detail[:MESSAGE_LIMIT] if isinstance(detail, str) else ""
        nodes.append(Node(exception_class_named(named or UNNAMED), message))
    decider = next((node for node in nodes if node.kind.name == named), nodes[0])
    status, code = envelope.get("status_code"), envelope.get("provider_code")
    if type(status) is int:
        decider.status = status
    if isinstance(code, str) and code:
        decider.codes = (code[:128],)
    return nodes


def reclassified(
    envelope: Mapping[str, Any],
    classifier: Classifier,
    earlier: Overrides | None,
    provider: str | None = None,
) -> Failure | None:
    """Return what `classifier` (holding the current overrides) makes of the failure an error
    envelope describes, classified by its reporter under the `earlier` overrides (None: unknown,
    its own word); or None when the reporter's classification stands, because no override speaks
    now, or the same one spoke then. An override gone since falls back on the core rules."""
    if not classifier.overrides and not earlier:
        return None
    if not _may_speak(envelope, classifier.overrides) and not _may_speak(envelope, earlier):
        return None
    nodes = envelope_nodes(envelope)
    now = _override(nodes, classifier.overrides, provider)
    then = _override(nodes, earlier, provider) if earlier is not None else None
    if now is not None:
        return None if then is not None and then.rule == now.rule else build_failure(nodes, now)
    if then is not None:
        return classifier.classify_nodes(nodes, provider)
    return None


def _may_speak(envelope: Mapping[str, Any], overrides: Overrides | None) -> bool:
    """Whether `overrides` could match: False without rules, or with rules on statuses only
    (the usual provider quirks: 498, 420, 529) none of which is the envelope's."""
    if not overrides:
        return False
    statuses = overrides.only_statuses()
    return statuses is None or envelope.get("status_code") in statuses


def _override(nodes: list[Node], overrides: Overrides, provider: str | None) -> Verdict | None:
    if not overrides:
        return None
    return next(
        (v for node in nodes if (v := override_verdict(node, overrides, provider)) is not None),
        None,
    )
