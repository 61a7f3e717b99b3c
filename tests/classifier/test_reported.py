"""classifier.reported: a reported failure judged again with newer provider overrides."""

from __future__ import annotations

from classifier import Classifier, FailureCategory, Overrides, Signal
from classifier.envelope import error_envelope
from classifier.reported import describes_exception, envelope_nodes, reclassified

T = FailureCategory


class CatalogError(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"catalog answered {status_code}")
        self.status_code = status_code


def reported(status_code: int = 404) -> dict:
    try:
        try:
            raise CatalogError(status_code)
        except CatalogError as inner:
            raise RuntimeError("lookup failed") from inner
    except RuntimeError as exc:
        return error_envelope(exc, provider="catalog")


REINDEXING = Overrides().add("status_code", 404, "transient", provider="catalog")


def with_rules(*rules: object) -> Overrides:
    overrides = Overrides()
    for rule in rules:
        overrides.add_rule(rule)  # type: ignore[arg-type]
    return overrides


def test_an_envelopes_chain_is_read_back_with_its_evidence_on_the_deciding_exception() -> None:
    envelope = reported()
    nodes = envelope_nodes(envelope)
    assert [node.kind.name for node in nodes] == [
        "builtins.RuntimeError",
        "tests.classifier.test_reported.CatalogError",
    ]
    assert nodes[0].status is None and nodes[1].status == 404
    assert nodes[1].message == "catalog answered 404"
    assert describes_exception(envelope)
    assert not describes_exception({"status": "error", "failure_type": "timeout"})


def test_a_new_override_replaces_the_reporters_classification() -> None:
    current = Classifier(with_rules(REINDEXING))
    failure = reclassified(reported(), current, Overrides(), "catalog")
    assert failure is not None
    assert (failure.category, failure.retryable, failure.signal) == (
        T.TRANSIENT,
        True,
        Signal.STATUS,
    )


def test_the_same_override_then_and_now_leaves_the_reporters_word() -> None:
    current = Classifier(with_rules(REINDEXING))
    assert reclassified(reported(), current, with_rules(REINDEXING), "catalog") is None


def test_an_override_of_another_provider_does_not_speak() -> None:
    current = Classifier(with_rules(REINDEXING))
    assert reclassified(reported(), current, Overrides(), "news") is None


def test_an_override_removed_since_falls_back_on_the_core_rules() -> None:
    failure = reclassified(reported(), Classifier(), with_rules(REINDEXING), "catalog")
    assert failure is not None and failure.category is T.RESOURCE_MISSING


def test_an_override_changed_since_says_its_new_word() -> None:
    gone = Overrides().add("status_code", 404, "resource_missing", provider="catalog")
    current = Classifier(with_rules(gone))
    failure = reclassified(reported(), current, with_rules(REINDEXING), "catalog")
    assert failure is not None and failure.category is T.RESOURCE_MISSING


def test_without_overrides_then_or_now_nothing_is_read() -> None:
    assert reclassified({"chain": object()}, Classifier(), None) is None


def test_a_chain_of_free_text_is_read_as_messages() -> None:
    nodes = envelope_nodes({"chain": ["something broke: badly", 42], "exception_type": ""})
    assert [node.message for node in nodes] == ["something broke: badly", "42"]
    assert {node.kind.name for node in nodes} == {"described.Error"}


def test_overrides_on_statuses_alone_are_not_asked_about_another_status() -> None:
    quirks, busy = Overrides(), Overrides()
    quirks.add("status_code", 529, "server_fault")
    busy.add("provider_code", "Busy", "rate_limited")
    assert quirks.only_statuses() == frozenset({529})
    assert busy.only_statuses() is None
    assert reclassified(reported(404), Classifier(quirks), None, "catalog") is None
    overloaded = reclassified(reported(529), Classifier(quirks), None, "catalog")
    assert overloaded is not None and overloaded.category is T.SERVER_FAULT
