"""Runs page: filters in the query string, keyset pages, bounded search, htmx fragment, retrying."""

from __future__ import annotations

import importlib
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from dashboard.filters import PAGE_SIZE, RunFilters
from orchestrator.models import Run

from .conftest import ago, make_failure, make_run, make_workflow, signed_in

RUNS = reverse("dashboard:runs")
TOTAL = reverse("dashboard:runs_total")


def ids(response) -> list[int]:
    return [r.pk for r in response.context["runs"]]


def test_filters_narrow_the_list(operator_client):
    wf = make_workflow()
    a = make_failure("timeout", source="news_api", agent="a1", workflow=wf)
    b = make_failure("auth_failure", source="web_search", agent="a2")
    c = make_run(source="news_api")
    assert ids(operator_client.get(RUNS + "?failure_type=timeout")) == [a.pk]
    assert ids(operator_client.get(RUNS + "?status=succeeded")) == [c.pk]
    assert ids(operator_client.get(RUNS + "?source=news_api")) == [c.pk, a.pk]
    assert ids(operator_client.get(RUNS + "?agent=a2")) == [b.pk]
    assert ids(operator_client.get(RUNS + f"?workflow={wf.pk}")) == [a.pk]
    assert ids(operator_client.get(RUNS + "?status=failed,escalated&source=news_api")) == [a.pk]
    assert ids(operator_client.get(RUNS + "?source=news_api,web_search&status=failed")) == [
        b.pk,
        a.pk,
    ]


def test_time_range_filters(operator_client):
    old = make_run(created_at=ago(days=3))
    new = make_run(created_at=ago(minutes=5))
    assert ids(operator_client.get(RUNS + "?range=24h")) == [new.pk]
    assert ids(operator_client.get(RUNS + "?range=7d")) == [new.pk, old.pk]
    since = (timezone.now() - timedelta(days=4)).strftime("%Y-%m-%dT%H:%M")
    until = (timezone.now() - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    assert ids(operator_client.get(RUNS + f"?since={since}&until={until}")) == [old.pk]


def test_flags_select_retries_partials_and_valid_empties(operator_client):
    first = make_failure("timeout")
    retry = make_failure("timeout", retry_of=first, attempt=2, partial_count=1)
    empty = make_run(result_count=0)
    assert ids(operator_client.get(RUNS + "?flag=retry")) == [retry.pk]
    assert ids(operator_client.get(RUNS + "?flag=wasted")) == [retry.pk]
    assert ids(operator_client.get(RUNS + "?flag=partial")) == [retry.pk]
    assert ids(operator_client.get(RUNS + "?flag=empty")) == [empty.pk]


def test_the_futile_flag_lists_failures_retried_against_their_signal(operator_client):
    futile = make_failure("server_fault", retryable=False, decision="retry")
    make_failure("server_fault", retryable=True, decision="retry")
    make_failure("auth_failure", retryable=False, decision="retry")  # a credential refresh
    make_failure("server_fault", retryable=False, decision="switch_source")
    response = operator_client.get(RUNS + "?flag=futile")
    assert ids(response) == [futile.pk]
    assert "failures retried although they said a retry cannot help" in response.content.decode()


def test_the_failure_type_filter_reads_aliases(operator_client):
    auth = make_failure("auth_failure")
    make_failure("timeout")
    assert ids(operator_client.get(RUNS + "?failure_type=auth_error")) == [auth.pk]
    assert ids(operator_client.get(RUNS + "?failure_type=Unauthorized,auth_failure")) == [auth.pk]


def test_the_switched_flag_lists_runs_started_after_a_switch(operator_client):
    wf = make_workflow()
    failed = make_failure(
        "auth_failure",
        workflow=wf,
        topic="film",
        decision="switch_source",
        finished_at=ago(minutes=10),
        created_at=ago(minutes=11),
    )
    switched = make_run(
        workflow=wf,
        topic="film",
        source="news_wire",
        created_at=ago(minutes=9),
        switched_from=failed,
    )
    make_run(workflow=wf, topic="film", source="news_archive", created_at=ago(minutes=9))
    assert ids(operator_client.get(RUNS + "?flag=switched")) == [switched.pk]


def test_search_looks_in_attempted_and_detail(operator_client):
    a = make_failure("timeout", detail="ReadTimeout talking to films.example")
    b = make_run(attempted={"query": "music royalties 2024"})
    make_run(attempted={"query": "games"})
    assert ids(operator_client.get(RUNS + "?q=films.example")) == [a.pk]
    assert ids(operator_client.get(RUNS + "?q=ROYALTIES")) == [b.pk]


def test_search_is_bounded_to_a_window(operator_client):
    make_failure("timeout", detail="needle", created_at=ago(days=2))
    response = operator_client.get(RUNS + "?q=needle")
    assert ids(response) == []
    assert "last 24 hours" in response.content.decode()
    assert len(ids(operator_client.get(RUNS + "?q=needle&range=7d"))) == 1
    f = RunFilters(_query("q=needle&since=2020-01-01T00:00"), now=timezone.now())
    assert f.is_valid()
    assert timezone.now() - f.cleaned_data["since"] <= timedelta(days=7, seconds=1)
    assert "at most 7 days" in f.notices[0]


def _query(raw: str):
    from django.http import QueryDict

    return QueryDict(raw)


def test_keyset_pages_neither_skip_nor_repeat(operator_client):
    same_time = timezone.now() - timedelta(minutes=1)
    created = [make_run(created_at=same_time) for _ in range(PAGE_SIZE + 5)]
    first = operator_client.get(RUNS)
    cursor = first.context["page"].next
    assert cursor and len(ids(first)) == PAGE_SIZE
    second = operator_client.get(RUNS + f"?after={cursor}")
    assert second.context["page"].next is None
    seen = ids(first) + ids(second)
    assert sorted(seen) == sorted(r.pk for r in created) and len(set(seen)) == len(seen)


def test_a_mangled_cursor_is_an_error_not_a_500(operator_client):
    make_run()
    response = operator_client.get(RUNS + "?after=%00garbage")
    assert response.status_code == 400
    assert "This page link is damaged" in response.content.decode()
    assert response.context["runs"] == []


def test_htmx_gets_the_table_fragment_with_filters_kept(operator_client):
    make_failure("timeout")
    response = operator_client.get(RUNS + "?failure_type=timeout", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert "<html" not in html and html.lstrip().startswith('<div id="results"')
    page = operator_client.get(RUNS).content.decode()
    assert 'hx-push-url="true"' in page and 'action="/runs/"' in page


def test_valid_empty_runs_look_different_from_failures(operator_client):
    make_run(result_count=0)
    make_failure("resource_missing")
    html = operator_client.get(RUNS).content.decode()
    assert "empty (valid)" in html and 'class="row-empty"' in html
    assert "ft-resource_missing" in html and 'class="row-failed"' in html


def test_empty_states(operator_client):
    assert "No runs yet" in operator_client.get(RUNS).content.decode()
    make_run()
    html = operator_client.get(RUNS + "?failure_type=timeout").content.decode()
    assert "No runs match these filters" in html


def test_bulk_controls_only_for_reviewers(operator_client, outsider, db):
    make_failure("timeout")
    html = operator_client.get(RUNS).content.decode()
    assert 'name="action" value="retry"' in html
    from django.contrib.auth.models import Permission

    viewer = outsider
    viewer.user_permissions.add(Permission.objects.get(codename="view_run"))
    from .conftest import signed_in

    html = signed_in(viewer).get(RUNS).content.decode()
    assert 'name="action"' not in html


def test_still_retrying_lists_scheduled_retries_and_keeps_watching_when_none(operator_client):
    first = make_failure("rate_limited")
    retry = make_run(
        status=Run.Status.QUEUED, retry_of=first, attempt=3, due_at=timezone.now() + timedelta(60)
    )
    url = reverse("dashboard:retrying")
    response = operator_client.get(url)
    assert [r.pk for r in response.context["runs"]] == [retry.pk]
    assert "every 10s" in response.content.decode()
    assert operator_client.get(url, HTTP_HX_REQUEST="true").status_code == 200
    Run.objects.filter(pk=retry.pk).update(status=Run.Status.RUNNING)
    empty = operator_client.get(url, HTTP_HX_REQUEST="true")
    # An empty list keeps polling: the next scheduled retry appears without a reload.
    html = empty.content.decode()
    assert empty.status_code == 200 and 'hx-trigger="every 10s"' in html
    assert "Nothing is waiting for a retry" in html and "checks every 10 s" in html
    assert "stops refreshing" not in html


@pytest.mark.parametrize("action", ["retry", "cancel", "escalate"])
def test_bulk_actions_go_to_the_coordinator_once_confirmed(operator_client, action):
    failed = [make_failure("timeout"), make_failure("timeout")]
    queued = [make_run(status=Run.Status.QUEUED), make_run(status=Run.Status.QUEUED)]
    done = make_run()  # succeeded: no action applies to it
    targets = queued if action == "cancel" else failed
    data = {"action": action, "run": [r.pk for r in [*targets, done]], "reason": "why"}
    data["next"] = RUNS + "?status=failed"
    asked = operator_client.post(reverse("dashboard:run_actions"), data)
    html = asked.content.decode()
    assert asked.status_code == 200 and "Left as they are" in html and f"#{done.pk}" in html
    assert (
        Run.objects.filter(pk__in=[r.pk for r in targets]).filter(status__in=["cancelled"]).count()
        == 0
    )
    assert not Run.objects.filter(retry_of__in=failed).exists()
    response = operator_client.post(
        reverse("dashboard:run_actions"), data | {"confirmed": "1"}, follow=True
    )
    assert response.redirect_chain[-1][0] == RUNS + "?status=failed"
    assert f"{action.capitalize()}: 2 runs done, 1 skipped" in response.content.decode()
    for target in targets:
        target.refresh_from_db()
        if action == "cancel":
            assert target.status == Run.Status.CANCELLED
        elif action == "escalate":
            assert target.review_items.get().reason.startswith("why")
        else:
            assert Run.objects.attempts_of(target).count() == 2


def test_one_run_is_retried_or_escalated_at_once_but_cancelled_only_after_asking(operator_client):
    failed, queued = make_failure("timeout"), make_run(status=Run.Status.QUEUED)
    url = reverse("dashboard:run_actions")
    operator_client.post(url, {"action": "retry", "run": [failed.pk]})
    assert Run.objects.attempts_of(failed).count() == 2
    asked = operator_client.post(url, {"action": "cancel", "run": [queued.pk]})
    assert "Yes, cancel 1 run" in asked.content.decode()
    queued.refresh_from_db()
    assert queued.status == Run.Status.QUEUED


def test_escalating_needs_a_reason(operator_client):
    failed = make_failure("timeout")
    response = operator_client.post(
        reverse("dashboard:run_actions"),
        {"action": "escalate", "run": [failed.pk], "reason": "  "},
        follow=True,
    )
    assert "Say why you escalate" in response.content.decode()
    assert not failed.review_items.exists()


def test_bulk_actions_refuse_bad_input_and_foreign_redirects(operator_client):
    response = operator_client.post(
        reverse("dashboard:run_actions"),
        {"action": "retry", "run": ["x"], "next": "https://evil.example/"},
    )
    assert response.status_code == 302 and response["Location"] == RUNS
    response = operator_client.post(reverse("dashboard:run_actions"), {"action": "explode"})
    assert response.status_code == 302


def test_the_trace_filter_lists_the_runs_of_one_trace(operator_client, outsider):
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    a = make_failure("rate_limited", trace_id=trace, span_id="00f067aa0ba902b7")
    b = make_run(trace_id=trace, span_id="00f067aa0ba902b8")
    make_run(trace_id="0" * 31 + "1")
    make_run()
    assert ids(operator_client.get(RUNS + f"?trace_id={trace.upper()}")) == [b.pk, a.pk]
    page = operator_client.get(RUNS + f"?trace_id={trace}")
    assert f'name="trace_id" value="{trace}"' in page.content.decode()
    refused = operator_client.get(RUNS + "?trace_id=not-a-trace")  # shown, not ignored
    assert refused.status_code == 400 and "is not a trace id" in refused.content.decode()
    assert operator_client.get(RUNS + f"?trace_id={trace}").context["filters"].active
    assert signed_in(outsider).get(RUNS + f"?trace_id={trace}").status_code == 403


def test_the_total_is_exact_up_to_a_cap_and_labelled_above_it(operator_client, monkeypatch):
    from django.db import connection

    from dashboard import filters

    for _ in range(8):
        make_failure("timeout")
    make_run()
    response = operator_client.get(TOTAL + "?failure_type=timeout")
    assert str(response.context["total"]) == "8" and response.context["total"].exact
    assert "<strong>8</strong> runs match" in response.content.decode()
    monkeypatch.setattr(filters, "EXACT_TOTAL", 5)
    over = operator_client.get(TOTAL + "?failure_type=timeout")
    capped = over.context["total"]
    assert not capped.exact
    assert "Counted exactly up to 5;" in over.content.decode()  # the cap in force, not a constant
    if connection.vendor == "postgresql" and capped.estimated:
        assert str(capped) == f"about {capped.count:,}" and capped.count > 5  # the planner's
    else:
        assert str(capped) == "over 5"


def test_a_page_holding_every_match_is_its_own_total_and_a_full_one_asks_for_it(
    operator_client, monkeypatch
):
    runs_view = importlib.import_module("dashboard.views.runs")  # the module, not the view

    for _ in range(4):
        make_failure("timeout")
    make_run()
    alone = operator_client.get(RUNS + "?failure_type=timeout")
    assert alone.context["total"].exact and alone.context["total"].count == 4
    assert "<strong>4</strong> runs match" in alone.content.decode()
    assert TOTAL not in alone.content.decode()  # nothing left to count
    monkeypatch.setattr(runs_view, "PAGE_SIZE", 3)
    full = operator_client.get(RUNS + "?failure_type=timeout")
    assert full.context["total"] is None and len(full.context["runs"]) == 3
    html = full.content.decode()
    asks = f'hx-get="{TOTAL}?failure_type=timeout" hx-trigger="load"'
    assert asks in html and "counting the runs that match" in html
    older = operator_client.get(RUNS + f"?failure_type=timeout&after={full.context['page'].next}")
    assert older.context["total"] is None  # one run here, but more on the page before
    assert f'hx-get="{TOTAL}?failure_type=timeout"' in older.content.decode()  # no cursor
    answer = operator_client.get(TOTAL + "?failure_type=timeout", HTTP_HX_REQUEST="true")
    text = answer.content.decode()
    assert answer.status_code == 200 and text.lstrip().startswith('<p class="total')
    assert "<strong>4</strong> runs match" in text and "<html" not in text
    refused = operator_client.get(TOTAL + "?status=nonsense")
    assert refused.status_code == 200 and refused.content == b""  # the list shows the error


def test_a_count_over_its_time_budget_is_cancelled_for_the_estimate(postgres, monkeypatch):
    """The exact count is cut at COUNT_BUDGET_MS (here a filter that sleeps on every row): the
    total is the planner's estimate, said to be one and why, and the connection's own statement
    timeout is as it was, inside the caller's transaction too."""
    from django.db import connection, transaction

    from dashboard import filters

    for _ in range(3):
        make_run()
    slow = Run.objects.extra(where=["pg_sleep(0.05)::text = ''"])  # 50 ms a row
    monkeypatch.setattr(filters, "COUNT_BUDGET_MS", 20)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = '7s'")
        total = filters.total(slow)
        cursor.execute("SHOW statement_timeout")
        assert cursor.fetchone()[0] == "7s"
        assert Run.objects.count() == 3  # the transaction is still usable
    assert total.cut and total.estimated and not total.exact
    assert str(total).startswith("about ") and "longer than 20 ms" in total.why
    assert filters.total(Run.objects.all()) == filters.Total(3, True)  # quick: counted


def test_source_and_agent_match_by_prefix_with_the_known_names_suggested(operator_client):
    api = make_run(source="news_api", agent="news-agent")
    wire = make_run(source="news_wire", agent="wire-agent")
    make_run(source="web_search", agent="crawler")
    assert ids(operator_client.get(RUNS + "?source=news")) == [wire.pk, api.pk]
    assert ids(operator_client.get(RUNS + "?source=NEWS_W")) == [wire.pk]
    assert ids(operator_client.get(RUNS + "?source=news&agent=wire")) == [wire.pk]
    assert ids(operator_client.get(RUNS + "?source=news_api")) == [api.pk]
    html = operator_client.get(RUNS).content.decode()
    assert '<datalist id="known-sources"><option value="news_api">' in html
    assert 'list="known-agents"' in html and '<option value="crawler">' in html
    nothing = operator_client.get(RUNS + "?source=zzz").content.decode()
    assert "No source name starts with “zzz”" in nothing


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("status=bogus", "status &#x27;bogus&#x27; is not one of"),
        ("failure_type=meteor", "&#x27;meteor&#x27; is not a failure type"),
        ("range=1y", "range &#x27;1y&#x27; is not one of"),
        ("flag=zzz", "flag &#x27;zzz&#x27; is not one of"),
        ("since=yesterday", "“From” &#x27;yesterday&#x27; is not a date and time"),
        ("workflow=abc", "workflow &#x27;abc&#x27; is not a workflow id"),
        ("group=999999", "There is no failure group #999999"),
        ("since=2025-01-02T00:00&until=2025-01-01T00:00", "“From” must come before “To”"),
    ],
)
def test_a_filter_the_page_cannot_use_is_an_error_not_ignored(operator_client, query, says):
    make_run()
    response = operator_client.get(f"{RUNS}?{query}")
    html = response.content.decode()
    assert response.status_code == 400 and says in html, html[html.find("errors") :][:400]
    assert response.context["runs"] == [] and "These filters cannot be used" in html
    fragment = operator_client.get(f"{RUNS}?{query}", HTTP_HX_REQUEST="true")
    assert fragment.status_code == 200 and says in fragment.content.decode()


def test_newest_newer_and_older_links_page_both_ways(operator_client):
    made = [make_run(created_at=ago(minutes=i)) for i in range(PAGE_SIZE * 2 + 10)]
    first = operator_client.get(RUNS)
    assert first.context["page"].first and first.context["page"].next
    second = operator_client.get(RUNS + f"?after={first.context['page'].next}")
    html = second.content.decode()
    assert all(f'rel="{rel}"' in html for rel in ("first", "prev", "next"))
    assert ids(second) == [r.pk for r in made[PAGE_SIZE : 2 * PAGE_SIZE]]
    newer = operator_client.get(RUNS + f"?before={second.context['page'].previous}")
    assert ids(newer) == ids(first) and newer.context["page"].first
    assert 'rel="prev"' not in newer.content.decode()


def test_actions_are_offered_only_where_they_apply(operator_client):
    ok = make_run()
    failed = make_failure("timeout")
    queued = make_run(status=Run.Status.QUEUED)
    html = operator_client.get(RUNS).content.decode()
    assert f'value="{ok.pk}" data-actions' not in html
    assert f'value="{failed.pk}" data-actions="retry escalate"' in html
    assert f'value="{queued.pk}" data-actions="cancel"' in html
    only_ok = operator_client.get(RUNS + "?status=succeeded").content.decode()
    assert 'name="action"' not in only_ok and "data-select-all" not in only_ok

    def buttons(run):
        page = operator_client.get(reverse("dashboard:run_detail", args=[run.pk])).content
        return {a for a in ("retry", "cancel", "escalate") if f'value="{a}"' in page.decode()}

    assert buttons(ok) == set()
    assert buttons(failed) == {"retry", "escalate"}
    assert buttons(queued) == {"cancel"}
    page = operator_client.get(reverse("dashboard:run_detail", args=[failed.pk])).content.decode()
    assert 'name="reason" required' in page  # a reason on the run page's Escalate too


def test_above_the_cap_postgresql_gives_the_planners_estimate(
    postgres, operator_client, monkeypatch
):
    from django.db import connection

    from dashboard import filters

    Run.objects.bulk_create(
        Run(agent="a", source="news_api", status=Run.Status.SUCCEEDED) for _ in range(400)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE orchestrator_run")
    monkeypatch.setattr(filters, "EXACT_TOTAL", 50)
    total = operator_client.get(TOTAL).context["total"]
    # The estimate of a partitioned table sums its partitions', and the planner guesses a few
    # rows for each empty one: close to the truth, not exact.
    assert total.estimated and str(total).startswith("about ")
    assert 380 <= total.count <= 440


def test_each_row_escapes_what_the_agent_sent(operator_client):
    """The runs list's rows are built as one string each: the agent, source, attempted call,
    detail and workflow name an agent sent reach the page escaped, each in its own cell."""
    from .conftest import HOSTILE_IMG, HOSTILE_SCRIPT

    workflow = make_workflow(name=HOSTILE_IMG)
    run = make_failure(
        agent=HOSTILE_SCRIPT,
        source=HOSTILE_IMG,
        attempted={"query": HOSTILE_SCRIPT},
        detail=HOSTILE_IMG,
        workflow=workflow,
        partial_count=2,
    )
    html = operator_client.get(reverse("dashboard:runs")).content.decode()
    assert "<script>alert" not in html and "<img src=x" not in html
    row = html.split(f'<a href="/runs/{run.pk}/">#{run.pk}</a>')[0].rsplit("<tr", 1)[1]
    row += html.split(f'<a href="/runs/{run.pk}/">#{run.pk}</a>')[1].split("</tr>", 1)[0]
    assert row.count("&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;") == 2
    assert row.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;") == 3
    assert "2 partial" in row and f'href="/workflows/{workflow.pk}/"' in row
