"""The corpus (tests/classifier/corpus/): each real library exception, raised against the local
fault servers, gets the category (and evidence) its case expects."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from classifier import FailureCategory, classify
from tests.classifier.corpus import CORPUS, Case, caught, service_available
from tests.classifier.faults import FaultEnv
from tests.conftest import require_service

T = FailureCategory


@pytest.mark.parametrize("case", CORPUS, ids=str)
def test_it_classifies_each_real_library_exception(case: Case, faults_env: FaultEnv) -> None:
    if case.needs:
        require_service(service_available(case.needs), case.needs)
    exc = case.produce(faults_env)
    failure = classify(exc)
    assert failure.category is case.category, (failure, exc.__class__)
    for name, expected in case.expect.items():
        actual = getattr(failure, name)
        if callable(expected):
            assert expected(actual), (name, actual)
        else:
            assert actual == expected, (name, actual, failure)
    assert failure.chain and failure.chain[0].startswith(
        f"{type(exc).__module__}.{type(exc).__qualname__}: "
    )


def test_the_corpus_covers_every_category_but_unclassified() -> None:
    assert {case.category for case in CORPUS} == set(FailureCategory) - {T.UNCLASSIFIED}


def test_case_names_are_unique() -> None:
    names = [case.name for case in CORPUS]
    assert len(names) == len(set(names))


def test_it_reads_a_urllib_http_error_carried_inside_a_wrapper(faults_env: FaultEnv) -> None:
    inner = caught(lambda: urllib.request.urlopen(faults_env.at("status-404"), timeout=1))
    assert isinstance(inner, urllib.error.HTTPError)
    inner.close()  # the response it holds; its status and headers stay readable
    try:
        raise RuntimeError("tool failed") from inner
    except RuntimeError as outer:
        failure = classify(outer)
    assert failure.category is T.RESOURCE_MISSING
    assert failure.exception_type == "urllib.error.HTTPError"
    assert failure.chain[0] == "builtins.RuntimeError: tool failed"
