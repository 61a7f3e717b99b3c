"""Which failure categories a retry of the same request can help, by default."""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from classifier.taxonomy import FailureCategory as C

# UNCLASSIFIED is True: retrying it at most once is the routing policy's call, not ours.
DEFAULT_RETRYABLE: Final = MappingProxyType(
    {
        C.TRANSIENT: True,
        C.RATE_LIMITED: True,
        C.TIMEOUT: True,
        C.SERVER_FAULT: True,
        C.AUTH_FAILURE: False,
        C.RESOURCE_MISSING: False,
        C.INVALID_INPUT: False,
        C.UNCLASSIFIED: True,
    }
)

RETRYABLE: Final = frozenset(
    category for category, retryable in DEFAULT_RETRYABLE.items() if retryable
)
