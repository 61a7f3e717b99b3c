"""Failure groups: folded from runs in batches, how each failure ended, states and regressions
(the pages: tests/dashboard/test_group_pages.py)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from insights import groups
from insights.models import FailureGroup, FailureGroupHour
from orchestrator.models import CREATED_AFTER_MARGIN, AuditEntry, Run

from .conftest import ago, make_failure, make_run

GROUPS = reverse("dashboard:failure_groups")


def timeout(n: int, **fields) -> Run:
    """A timeout of news_api: every one of these has the same signature (numbers vary)."""
    fields.setdefault("source", "news_api")
    fields.setdefault("status", Run.Status.FAILED)
    return make_run(failure_type="timeout", detail=f"ReadTimeout after {n} s", **fields)


@pytest.fixture
def story(db) -> dict[str, Run]:
    return failures_ending_every_way()


def failures_ending_every_way() -> dict[str, Run]:
    """One group whose failures ended every way there is."""
    runs = {}
    runs["a"] = timeout(1, decision="retry")
    make_run(source="news_api", retry_of=runs["a"], attempt=2)  # the retry succeeded
    runs["b"] = timeout(2, decision="switch_source")
    make_run(source="news_wire", switched_from=runs["b"])  # the switched run succeeded
    runs["c"] = timeout(3, decision="switch_source")
    runs["c2"] = make_failure(
        "server_fault", source="news_wire", switched_from=runs["c"], decision="retry"
    )
    make_run(source="news_wire", retry_of=runs["c2"], attempt=2)  # the switch's retry did
    runs["d"] = timeout(4, status=Run.Status.ESCALATED, decision="escalate")
    runs["e"] = timeout(5)  # no decision yet
    runs["f"] = timeout(6, decision="retry", retryable=False)  # retried against its signal
    make_run(source="news_api", retry_of=runs["f"], attempt=2, status=Run.Status.QUEUED)
    runs["g"] = timeout(7, decision="abort")
    runs["h"] = timeout(8, retry_of=runs["g"], attempt=2, decision="accept_partial")
    return runs


def test_the_fold_groups_failures_by_signature_and_says_how_each_ended(story):
    assert groups.fold() > 0
    group = FailureGroup.objects.get(source="news_api")
    other = FailureGroup.objects.get(source="news_wire")  # the switched run's server fault
    assert (group.failure_type, group.pattern) == ("timeout", "readtimeout after <num> s")
    assert group.count == 8 and other.count == 1
    endings = {e.value: getattr(group, c) for e, c in groups.ENDING_COLUMNS.items()}
    assert endings == {
        "recovered_retry": 1,  # a
        "recovered_switch": 2,  # b, and c through the switched run's own retry
        "escalated": 1,  # d
        "open": 2,  # e (undecided), f (its retry is queued)
        "lost": 2,  # g (aborted), h (partial results accepted)
    }
    assert (group.decided_retry, group.decided_switch, group.decided_escalate) == (2, 2, 1)
    assert (group.decided_abort, group.decided_partial, group.wasted) == (1, 1, 1)  # h retried g
    assert group.futile == 1  # f said a retry cannot help and was retried
    assert other.recovered_retry == 1
    assert group.agents == ["researcher"] and group.example_run == story["a"]
    assert Run.objects.filter(pk=story["a"].pk).values_list("signature", flat=True)[0]


def test_what_follows_a_failure_is_found_within_the_clock_margin_and_not_before(db):
    """The probes look only at runs created after the failure (less CREATED_AFTER_MARGIN, for the
    clocks of different web processes), which lets PostgreSQL skip older partitions."""
    skew = CREATED_AFTER_MARGIN / 2
    failed = timeout(1, decision="retry")
    make_run(source="news_api", retry_of=failed, attempt=2, created_at=failed.created_at - skew)
    switched = timeout(2, decision="switch_source")
    make_run(source="news_wire", switched_from=switched, created_at=switched.created_at - skew)
    stray = timeout(3, decision="retry")  # a "retry" stamped long before it: not its follower
    stray_at = stray.created_at - 3 * CREATED_AFTER_MARGIN
    make_run(source="news_api", retry_of=stray, attempt=2, created_at=stray_at)

    endings = dict(
        Run.objects.filter(pk__in=[failed.pk, switched.pk, stray.pk])
        .annotate(ending=groups.ending())
        .values_list("pk", "ending")
    )
    assert endings == {
        failed.pk: "recovered_retry",
        switched.pk: "recovered_switch",
        stray.pk: "lost",
    }


def test_a_pages_endings_are_the_folds(story):
    """A group's page sets each run's ending with probes bounded by its oldest run (so that
    PostgreSQL plans them over the newest partitions only): the same endings as the fold's."""
    pending = timeout(9, decision="switch_source")  # its switched run's retry is still queued
    started = make_failure("server_fault", source="news_wire", switched_from=pending)
    make_run(source="news_wire", retry_of=started, attempt=2, status=Run.Status.QUEUED)
    runs = [*story.values(), pending]
    folded = dict(
        Run.objects.filter(pk__in=[r.pk for r in runs])
        .annotate(ending=groups.ending())
        .values_list("pk", "ending")
    )
    paged = {run.pk: run.ending for run in groups.add_endings(list(runs))}
    assert paged == folded
    assert paged[pending.pk] == "open" and paged[story["c"].pk] == "recovered_switch"
    assert groups.add_endings([]) == []
    # The statement is compiled once per number of runs: two pages of four, the second with
    # other runs and another oldest run, each get their own endings from it.
    ordered = sorted(runs, key=lambda run: run.created_at)
    for page in (ordered[:4], ordered[-4:]):
        got = {run.pk: run.ending for run in groups.add_endings(list(page))}
        assert got == {run.pk: folded[run.pk] for run in page}


def test_folding_again_recomputes_instead_of_adding(story):
    groups.fold()
    first = FailureGroup.objects.values_list("pk", "count", "ended_open")
    Run.objects.filter(retry_of=story["f"]).update(status=Run.Status.SUCCEEDED)
    groups.fold()
    group = FailureGroup.objects.get(source="news_api")
    assert group.count == 8  # not 16: the recent hours were recomputed
    assert (group.ended_open, group.recovered_retry) == (1, 2)  # f's retry finished meanwhile
    assert len(list(first)) == FailureGroup.objects.count()


def test_a_resolved_group_that_fails_again_is_a_regression(db, operator):
    timeout(1, created_at=ago(minutes=30))
    groups.fold()
    group = FailureGroup.objects.get()
    assert groups.set_state(group, FailureGroup.State.RESOLVED, operator)
    assert AuditEntry.objects.get(action="failuregroup.resolved").actor == operator
    groups.fold()  # nothing new: it stays resolved
    group.refresh_from_db()
    assert group.state == FailureGroup.State.RESOLVED and not group.is_regression
    timeout(2)
    groups.fold()
    group.refresh_from_db()
    assert group.state == FailureGroup.State.OPEN and group.is_regression
    html = signed_in_get(operator, GROUPS)
    assert "regression" in html


def test_a_muted_group_stays_muted_but_keeps_counting(db, operator):
    timeout(1)
    groups.fold()
    group = FailureGroup.objects.get()
    groups.set_state(group, FailureGroup.State.MUTED, operator)
    timeout(2)
    groups.fold()
    group.refresh_from_db()
    assert (group.state, group.count, group.regressed_at) == ("muted", 2, None)


def test_no_counter_is_updated_on_the_ingest_path(db):
    """Groups come from the periodic fold only: storing a failure writes no group row."""
    timeout(1)
    assert not FailureGroup.objects.exists() and not FailureGroupHour.objects.exists()


def signed_in_get(user, url: str) -> str:
    from .conftest import signed_in

    return signed_in(user).get(url).content.decode()
