"""Pure failure classification: standard library only, no I/O, never raises.

from classifier import classify
failure = classify(exc)          # failure.category, .retryable, .retry_after, ...
"""

from classifier.engine import Classifier, classify
from classifier.failure import Failure, Signal
from classifier.overrides import MatchOn, OverrideRule, Overrides
from classifier.retry_after import parse_retry_after
from classifier.taxonomy import TAXONOMY_VERSION, FailureCategory

__all__ = [
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
