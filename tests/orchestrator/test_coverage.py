"""Coverage verdicts per topic: well supported only when two sources answered with results; a
failed call's partial results are never support (alone they make a topic thin), every failure is
named, and a 404 reads "not found at" its source (it was reached)."""

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
        "film is thin: 5 partial results from 2 failed calls; news_api could not be reached "
        "(timeout, kept 2 partial results); news_wire could not be reached (server_fault, kept 3 "
        "partial results)."
    )
    assert entry["partial_results"] == 5 and len(entry["failures"]) == 2


def test_one_failed_calls_partial_results_are_thin():
    entry = topic_coverage("film", [failed("news_api", "timeout", 2)], {})
    assert entry["verdict"] == Verdict.THIN
    assert entry["why"].startswith("film is thin: 2 partial results from a failed call; ")


def test_a_failed_calls_partial_results_are_not_a_second_source_of_support():
    entry = topic_coverage(
        "farming", [ok("news_archive"), failed("news_wire", "resource_missing", 2)], {}
    )
    assert entry["verdict"] == Verdict.THIN
    assert entry["why"] == (
        "farming is thinly supported by news_archive (3 results); not found at news_wire "
        "(resource_missing, kept 2 partial results)."
    )


def test_two_sources_with_one_success_and_one_timeout_are_thin_and_the_failure_is_named():
    entry = topic_coverage("film", [ok("news_api"), failed("news_wire", "timeout", 2)], {})
    assert entry["verdict"] == Verdict.THIN
    assert entry["why"] == (
        "film is thinly supported by news_api (3 results); "
        "news_wire could not be reached (timeout, kept 2 partial results)."
    )


def test_a_404_is_not_found_at_its_source_and_other_failures_could_not_be_reached():
    runs = [failed("news_api", "resource_missing"), failed("news_wire", "auth_failure")]
    entry = topic_coverage("film", runs, {})
    assert entry["verdict"] == Verdict.GAP
    assert entry["why"] == (
        "film could not be assessed: not found at news_api (resource_missing); "
        "news_wire could not be reached (auth_failure)."
    )


def test_a_source_that_timed_out_then_answered_404_reads_not_found():
    runs = [failed("news_api", "timeout"), failed("news_api", "resource_missing")]
    why = topic_coverage("film", runs, {})["why"]
    assert why == "film could not be assessed: not found at news_api (resource_missing, timeout)."


def test_two_successes_are_well_supported_and_a_third_sources_failure_is_named():
    entry = topic_coverage("film", [ok("news_api"), ok("news_wire", 1)], {})
    assert entry["verdict"] == Verdict.WELL_SUPPORTED
    assert entry["why"] == "film is well supported by news_api (3 results), news_wire (1 result)."
    runs = [ok("news_api"), ok("news_wire", 1), failed("scholar_api", "resource_missing", 1)]
    assert topic_coverage("film", runs, {})["why"] == (
        "film is well supported by news_api (3 results), news_wire (1 result); not found at "
        "scholar_api (resource_missing, kept 1 partial result)."
    )


def test_a_topic_resting_on_partial_results_degrades_its_workflow():
    runs = [failed("news_api", "timeout", 2), failed("news_wire", "auth_failure", 1)]
    cov = {"film": topic_coverage("film", runs, {})}
    assert final_status(cov, runs) == "degraded"
