"""Failure groups: folded from runs in batches, how each failure ended, states and regressions,
the groups pages, and every tile reaching its groups."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard import groups
from dashboard.models import FailureGroup, FailureGroupHour
from dashboard.stats import WINDOWS
from dashboard.tiles import overview_tiles
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
    assert (group.failure_type, group.pattern) == ("timeout", "readtimeout after <n> s")
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


def test_the_groups_page_counts_a_window_and_filters(db, operator_client):
    timeout(1, created_at=ago(days=3))
    groups.fold(timezone.now() - timedelta(days=4))
    timeout(2)
    make_failure("auth_failure", source="web_search", detail="401 key expired")
    groups.fold()
    every = operator_client.get(GROUPS)
    assert len(every.context["rows"]) == 2
    month = next(r for r in every.context["rows"] if r.group.failure_type == "timeout").spark
    assert len(month) == 30 and sum(month) == 2 and month[-1] == 1  # by day: today, 3 days ago
    assert month[-4] + month[-5] == 1
    day = operator_client.get(GROUPS + "?range=24h&failure_type=timeout")
    (row,) = day.context["rows"]
    assert (row.group.count, row.window_counts["count"]) == (2, 1)
    assert sum(row.spark) == 1 and len(row.spark) == 24
    assert operator_client.get(GROUPS + "?source=web_search").context["rows"][0].group.source == (
        "web_search"
    )
    refused = operator_client.get(GROUPS + "?range=1y&has=everything")
    assert refused.status_code == 400 and refused.context["rows"] == []
    assert "1y" in refused.content.decode() and "is not one of: 24h, 7d, 30d" in (
        refused.content.decode()
    )


def test_a_group_page_shows_its_runs_with_how_each_ended(story, operator_client):
    groups.fold()
    group = FailureGroup.objects.get(source="news_api")
    response = operator_client.get(reverse("dashboard:failure_group", args=[group.pk]))
    html = response.content.decode()
    assert {r.pk for r in response.context["runs"]} == {
        story[k].pk for k in ("a", "b", "c", "d", "e", "f", "g", "h")
    }
    assert "recovered by retry" in html and "recovered by switch" in html and "lost" in html
    runs = operator_client.get(reverse("dashboard:runs") + f"?group={group.pk}")
    assert len(runs.context["runs"]) == 8


def test_state_changes_need_the_review_permission(db, operator_client, outsider_client):
    timeout(1)
    groups.fold()
    group = FailureGroup.objects.get()
    url = reverse("dashboard:failure_group_state", args=[group.pk])
    assert outsider_client.post(url, {"state": "muted"}).status_code == 403
    operator_client.post(url, {"state": "muted"})
    group.refresh_from_db()
    assert group.state == "muted" and group.state_changed_by.username == "olga"
    operator_client.post(url, {"state": "bogus"})
    group.refresh_from_db()
    assert group.state == "muted"


def test_every_tile_reaches_its_groups(db, operator_client):
    timeout(1)
    groups.fold()
    tiles = overview_tiles(WINDOWS["24h"])
    everything = [t for key in ("traffic", "failures", "recovery", "attention") for t in tiles[key]]
    linked = {t.key: t.groups for t in everything if t.groups}
    sources = next(t for t in everything if t.key == "sources")
    review = next(t for t in everything if t.key == "review")
    # Nothing in trouble and no review open: nothing to drill into, so no link at all.
    assert (sources.href, sources.groups, review.groups) == ("", "", "")
    # Runs in flight have not failed: they belong to no failure group.
    assert set(linked) == {t.key for t in everything} - {"sources", "review", "in_flight"}
    assert linked["ft-timeout"] == GROUPS + "?range=24h&failure_type=timeout"
    listed = operator_client.get(linked["ft-timeout"]).context["rows"]
    assert [r.group.failure_type for r in listed] == ["timeout"]
    for key, url in linked.items():
        assert operator_client.get(url).status_code == 200, key
    html = operator_client.get(reverse("dashboard:overview")).content.decode()
    sources_tile = html[html.index('data-tile="sources"') :].split('data-tile="', 2)[1]
    assert "href=" not in sources_tile.split("</div>\n</div>")[0]


def test_no_counter_is_updated_on_the_ingest_path(db):
    """Groups come from the periodic fold only: storing a failure writes no group row."""
    timeout(1)
    assert not FailureGroup.objects.exists() and not FailureGroupHour.objects.exists()


def signed_in_get(user, url: str) -> str:
    from .conftest import signed_in

    return signed_in(user).get(url).content.decode()
