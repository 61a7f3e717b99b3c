"""Pure failure classification (standard library only, no I/O, never raises).

failure = classifier.classify(exc)   # .category, .retryable, .retry_after, ...
"""

from classifier.engine import Classifier, classify
from classifier.failure import Failure
from classifier.overrides import MatchOn, OverrideRule, Overrides
from classifier.retry_after import parse_retry_after
from classifier.rules import RETRYABLE
from classifier.taxonomy import TAXONOMY_VERSION, FailureCategory, Signal

__all__ = [
    "RETRYABLE",
    "TAXONOMY_VERSION",
    "Classifier",
    "Failure",
    "FailureCategory",
    "MatchOn",
    "OverrideRule",
    "Overrides",
    "Signal",
    "classify",
    "parse_retry_after",
]
