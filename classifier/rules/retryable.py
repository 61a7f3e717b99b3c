"""Which failure categories a retry of the same request can help, by default."""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from classifier.taxonomy import FailureCategory as C

# Whether retrying the same request can ever help, per category. UNCLASSIFIED is True on purpose:
# "retry conservatively, at most once, then ask a human" is the routing policy's job, and it needs
# the classifier not to rule the retry out.
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

# The categories retryable by default, for callers that route on the category alone.
RETRYABLE: Final = frozenset(
    category for category, retryable in DEFAULT_RETRYABLE.items() if retryable
)
