"""Pure failure classification: standard library only, no I/O, never raises."""

from classifier.taxonomy import TAXONOMY_VERSION, FailureCategory

__all__ = ["TAXONOMY_VERSION", "FailureCategory"]
