"""Coverage verdicts per topic: well supported only when a source answered; partial results
alone make a topic thin, with every failure named."""

from __future__ import annotations

from itertools import count

from orchestrator.coordination.coverage import Verdict, final_status, topic_coverage
from orchestrator.models import Run

_ids = count(1)


def run(source: str, status: str, **fields) -> Run:
    """An unsaved run: coverage reads rows, it never queries."""
    fields.setdefault("result_count", 0)
    return Run(pk=next(_ids), topic="film", source=source, status=status, **fields)


def ok(source: str, results: int = 3) -> Run:
    return run(source, Run.Status.SUCCEEDED, result_count=results)


def failed(source: str, failure_type: str, partial: int = 0) -> Run:
    return run(source, Run.Status.FAILED, failure_type=failure_type, partial_count=partial)


def test_partial_results_alone_make_a_topic_thin_with_the_failures_named():
    entry = topic_coverage(
        "film", [failed("news_api", "timeout", 2), failed("news_wire", "server_fault", 3)], {}
    )
    assert entry["verdict"] == Verdict.THIN
    assert entry["why"] == (
        "film is thinly supported by only partial results from news_api (2 partial results), "
        "news_wire (3 partial results); news_api could not be reached (timeout, kept 2 partial "
        "results); news_wire could not be reached (server_fault, kept 3 partial results)."
    )
    assert entry["partial_results"] == 5 and len(entry["failures"]) == 2


def test_two_sources_with_one_success_are_well_supported_and_the_failure_is_named():
    entry = topic_coverage("film", [ok("news_api"), failed("news_wire", "timeout", 2)], {})
    assert entry["verdict"] == Verdict.WELL_SUPPORTED
    assert entry["why"] == (
        "film is well supported by news_api (3 results), news_wire (2 partial results); "
        "news_wire could not be reached (timeout, kept 2 partial results)."
    )


def test_two_successes_are_well_supported():
    entry = topic_coverage("film", [ok("news_api"), ok("news_wire", 1)], {})
    assert entry["verdict"] == Verdict.WELL_SUPPORTED
    assert entry["why"] == "film is well supported by news_api (3 results), news_wire (1 result)."


def test_a_topic_resting_on_partial_results_degrades_its_workflow():
    runs = [failed("news_api", "timeout", 2), failed("news_wire", "auth_failure", 1)]
    cov = {"film": topic_coverage("film", runs, {})}
    assert final_status(cov, runs) == "degraded"
