"""The classifier: read the chain, judge it, build the Failure; classifying never raises."""

from __future__ import annotations

from typing import Final

from classifier.failure import Failure, build_failure, unreadable_failure
from classifier.judge import decide
from classifier.overrides import Overrides
from classifier.signals import Node, read_chain


class Classifier:
    """Classify exceptions with the core rules, after the registered `overrides`."""

    def __init__(self, overrides: Overrides | None = None, provider: str | None = None) -> None:
        self.overrides = overrides if overrides is not None else Overrides()
        self.provider = provider

    def __repr__(self) -> str:
        return f"Classifier(overrides={self.overrides!r}, provider={self.provider!r})"

    def classify(self, exc: BaseException, provider: str | None = None) -> Failure:
        """Return the Failure `exc` represents; never raises, does no I/O."""
        try:
            return self.classify_nodes(read_chain(exc), provider)
        except Exception:
            return unreadable_failure(exc)

    def classify_nodes(self, nodes: list[Node], provider: str | None = None) -> Failure:
        """Return the Failure a chain of nodes (outermost first) represents."""
        return build_failure(nodes, decide(nodes, self.overrides, provider or self.provider))


DEFAULT_CLASSIFIER: Final = Classifier()


def classify(exc: BaseException) -> Failure:
    """Return the Failure `exc` represents under the default classifier; never raises."""
    return DEFAULT_CLASSIFIER.classify(exc)
