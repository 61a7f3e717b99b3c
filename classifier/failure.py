"""The classification result: what kind of failure, and the evidence that decided it."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from classifier.rules import DEFAULT_RETRYABLE
from classifier.taxonomy import TAXONOMY_VERSION, FailureCategory

_new = object.__new__


class Signal(StrEnum):
    """Which kind of evidence decided the category, strongest first."""

    # An HTTP status or a gRPC status code, on the exception or on its response.
    STATUS = "status"
    # A provider's own error code: AWS Error.Code, OpenAI/Anthropic error code or type, SQLSTATE.
    PROVIDER_CODE = "provider_code"
    # The exception's class: a known class in its MRO, or a telling class name.
    TYPE = "type"
    # Only the message said so: the least trusted evidence.
    MESSAGE = "message"
    # Nothing recognisable: the category is UNCLASSIFIED.
    NONE = "none"


@dataclass(frozen=True)
class Failure:
    """A classified failure. `exception_type` names the exception that carried the signal.

    No `slots`: `make` fills the instance dict directly, three times faster than the frozen
    `__init__` (which goes through object.__setattr__ once per field) on the classify hot path.
    """

    category: FailureCategory
    retryable: bool
    retry_after: float | None = None
    status_code: int | None = None
    provider_code: str | None = None
    exception_type: str = ""
    signal: Signal = Signal.NONE
    chain: tuple[str, ...] = ()
    detail: str = ""

    @classmethod
    def make(
        cls,
        category: FailureCategory,
        retryable: bool,
        retry_after: float | None,
        status_code: int | None,
        provider_code: str | None,
        exception_type: str,
        signal: Signal,
        chain: tuple[str, ...],
        detail: str,
    ) -> Failure:
        """Return a Failure built without the frozen __init__'s per-field overhead.

        One dict display handed to `update`: keyword arguments would build the same dict
        through the slower calling convention.
        """
        failure = _new(cls)
        failure.__dict__.update(
            {
                "category": category,
                "retryable": retryable,
                "retry_after": retry_after,
                "status_code": status_code,
                "provider_code": provider_code,
                "exception_type": exception_type,
                "signal": signal,
                "chain": chain,
                "detail": detail,
            }
        )
        return failure

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
        """Return the failure `data` describes (as `to_dict` or an envelope writes it), leniently.

        Unknown categories become UNCLASSIFIED, a missing `retryable` takes the category's
        default, and fields of the wrong type are dropped; this never raises.
        """
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
        retry_after = data.get("retry_after")
        status_code = data.get("status_code")
        chain = data.get("chain")
        return cls(
            category=category,
            retryable=retryable if isinstance(retryable, bool) else DEFAULT_RETRYABLE[category],
            retry_after=_finite_delay(retry_after),
            status_code=status_code if type(status_code) is int else None,
            provider_code=_str_or_none(data.get("provider_code")),
            exception_type=_str_or_none(data.get("exception_type")) or "",
            signal=signal,
            chain=tuple(str(x) for x in chain) if isinstance(chain, list | tuple) else (),
            detail=_str_or_none(data.get("detail")) or "",
        )


def _finite_delay(value: Any) -> float | None:
    """Return `value` as a float if it is a finite, non-negative number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if 0.0 <= value < float("inf") else None


def _str_or_none(value: Any) -> str | None:
    """Return `value` if it is a string, else None."""
    return value if isinstance(value, str) else None
