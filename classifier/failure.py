"""The classification result, `Failure`, and how a verdict over a chain becomes one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from classifier.judge import Verdict
from classifier.retry_after import delay_from_body, delay_from_values, header_values
from classifier.rules import DEFAULT_RETRYABLE, NON_RETRYABLE_CODES, NON_RETRYABLE_STATUS
from classifier.signals import Node, class_name, message_of
from classifier.taxonomy import TAXONOMY_VERSION, FailureCategory, Signal

__all__ = ["Failure", "Signal", "build_failure", "unreadable_failure"]


@dataclass(frozen=True)
class Failure:
    """A classified failure. `exception_type` names the exception whose evidence decided."""

    category: FailureCategory
    retryable: bool
    retry_after: float | None = None
    status_code: int | None = None
    provider_code: str | None = None
    exception_type: str = ""
    signal: Signal = Signal.NONE
    chain: tuple[str, ...] = ()
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Return the failure as JSON-ready data, taxonomy values as plain strings."""
        return {
            "category": str(self.category.value),
            "retryable": bool(self.retryable),
            "retry_after": self.retry_after,
            "status_code": self.status_code,
            "provider_code": self.provider_code,
            "exception_type": self.exception_type,
            "signal": str(self.signal.value),
            "chain": list(self.chain),
            "detail": self.detail,
            "taxonomy_version": TAXONOMY_VERSION,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Failure:
        """Return the failure `data` describes (as `to_dict` or an envelope writes it), leniently;
        never raises."""
        if not isinstance(data, dict):
            data = {}
        raw = data.get("category", data.get("failure_type"))
        try:
            category = FailureCategory(raw)
        except ValueError:
            category = FailureCategory.UNCLASSIFIED
        try:
            signal = Signal(data.get("signal"))
        except ValueError:
            signal = Signal.NONE
        retryable = data.get("retryable")
        status_code = data.get("status_code")
        chain = data.get("chain")
        return cls(
            category=category,
            retryable=retryable if isinstance(retryable, bool) else DEFAULT_RETRYABLE[category],
            retry_after=_finite_delay(data.get("retry_after")),
            status_code=status_code if type(status_code) is int else None,
            provider_code=_str_or_none(data.get("provider_code")),
            exception_type=_str_or_none(data.get("exception_type")) or "",
            signal=signal,
            chain=tuple(str(x) for x in chain) if isinstance(chain, list | tuple) else (),
            detail=_str_or_none(data.get("detail")) or "",
        )


def build_failure(nodes: list[Node], verdict: Verdict) -> Failure:
    """Return the Failure that `verdict` makes of a chain of `nodes` (outermost first)."""
    outer = nodes[0]
    decider = verdict.node if verdict.node is not None else outer
    found = header_values(decider.headers)
    retryable = _retryable(verdict, decider, found)
    return Failure(
        category=verdict.category,
        retryable=retryable,
        retry_after=_delay(decider, nodes, found) if retryable else None,
        status_code=_status(decider, nodes),
        provider_code=_provider_code(verdict, decider),
        exception_type=decider.kind.name,
        signal=verdict.signal,
        chain=tuple(f"{node.kind.name}: {node.message}" for node in nodes),
        detail=_detail(outer, decider),
    )


def unreadable_failure(exc: Any) -> Failure:
    """Return the UNCLASSIFIED Failure of something that cannot be read at all; never raises."""
    try:
        name = class_name(type(exc))
    except Exception:
        name = "?"
    message = message_of(exc)
    return Failure(
        category=FailureCategory.UNCLASSIFIED,
        retryable=DEFAULT_RETRYABLE[FailureCategory.UNCLASSIFIED],
        exception_type=name,
        signal=Signal.NONE,
        chain=(f"{name}: {message}",),
        detail=f"{name.rpartition('.')[2]}: {message}",
    )


def _retryable(verdict: Verdict, decider: Node, found: dict[str, Any]) -> bool:
    """Return whether a retry can help: the override, the provider's own say, then the rules."""
    if verdict.rule is not None and verdict.rule.retryable is not None:
        return verdict.rule.retryable
    if decider.flag is not None:
        return decider.flag
    should_retry = _should_retry(found)
    if should_retry is not None:
        return should_retry
    if verdict.signal is Signal.STATUS and decider.status in NON_RETRYABLE_STATUS:
        return False
    if verdict.code is not None and verdict.code in NON_RETRYABLE_CODES:
        return False
    return DEFAULT_RETRYABLE[verdict.category]


def _should_retry(found: dict[str, Any]) -> bool | None:
    value = found.get("x-should-retry")
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return None


def _delay(decider: Node, nodes: list[Node], found: dict[str, Any]) -> float | None:
    """A delay the exceptions state, then their headers', then their bodies' (the decider's
    first each time): a header beats a body."""
    if decider.delay is not None:
        return decider.delay
    delay = delay_from_values(found)
    if delay is not None:
        return delay
    for node in nodes:
        if node is decider:
            continue
        if node.delay is not None:
            return node.delay
        delay = delay_from_values(header_values(node.headers))
        if delay is not None:
            return delay
    for node in (decider, *(node for node in nodes if node is not decider)):
        if node.body is not None:
            delay = delay_from_body(node.body)
            if delay is not None:
                return delay
    return None


def _status(decider: Node, nodes: list[Node]) -> int | None:
    if decider.status is not None:
        return decider.status
    return next((node.status for node in nodes if node.status is not None), None)


def _provider_code(verdict: Verdict, decider: Node) -> str | None:
    code = verdict.code
    if code is None and verdict.rule is None:
        code = decider.codes[0] if decider.codes else decider.grpc or decider.sqlstate
    return code[:128] if code else None


def _detail(outer: Node, decider: Node) -> str:
    text = f"{outer.kind.qualname}: {outer.message}" if outer.message else outer.kind.qualname
    if decider is not outer:
        inner = decider.kind.qualname
        text += f" (caused by {inner}: {decider.message})" if decider.message else f" ({inner})"
    return text


def _finite_delay(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if 0.0 <= value < float("inf") else None


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
