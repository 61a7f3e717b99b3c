"""The top bar's search (`/search/`): each kind found by id and by text, each section in keyset
pages of its own, every agent-sent string escaped, sign-in and permissions; on SQLite and, with
the runs' search table and trigram indexes, on PostgreSQL."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission, User
from django.core.cache import cache
from django.utils import timezone

from insights.models import FailureGroup
from orchestrator import search as run_search

from .conftest import (
    HOSTILE_IMG,
    HOSTILE_SCRIPT,
    ago,
    make_failure,
    make_review,
    make_run,
    make_workflow,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_names():
    """The search reads agent and source names as the runs filter caches them (for a minute):
    each test starts without another test's names."""
    cache.delete_many(["dashboard:known:agent", "dashboard:known:source"])


def make_group(**fields) -> FailureGroup:
    now = timezone.now()
    fields.setdefault("signature", "ab12cd34" * 4)
    fields.setdefault("source", "news_api")
    fields.setdefault("failure_type", "timeout")
    fields.setdefault("pattern", "ReadTimeout: read timed out after <n> s")
    return FailureGroup.objects.create(first_seen=now, last_seen=now, count=3, **fields)


def section(html: str, kind: str) -> str:
    """The markup of one section of the results page ("" when absent)."""
    found = re.search(rf'<section[^>]*id="search-{kind}".*?</section>', html, re.S)
    return found.group(0) if found else ""


def hits(html: str, kind: str) -> list[str]:
    """The links of a section's hits, in order: ["Run #3", "Review #1", ...]."""
    links = re.findall(
        r'<li class="hit[^"]*">.*?<a href="[^"]+">(.*?)</a>', section(html, kind), re.S
    )
    return [re.sub(r"<[^>]+>", "", link) for link in links]


def get(client, q: str, **params):
    return client.get("/search/", {"q": q, **params})


def test_the_search_needs_a_sign_in(client):
    response = client.get("/search/?q=timeout")
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]


def test_an_outsider_is_refused(outsider_client):
    make_failure(detail="ReadTimeout")
    assert get(outsider_client, "ReadTimeout").status_code == 403


def test_the_top_bar_has_the_search_box_on_every_page(operator_client):
    for path in ("/", "/runs/", "/review/", "/groups/", "/workflows/"):
        html = operator_client.get(path).content.decode()
        assert 'class="topsearch"' in html and 'action="/search/"' in html, path
        assert 'name="q" value=""' in html.split('class="topsearch"')[1][:400], path


def test_the_box_keeps_the_text_on_the_results_page_escaped(operator_client):
    html = get(operator_client, '"><script>x</script>').content.decode()
    box = html.split('class="topsearch"')[1][:500]
    assert 'value="&quot;&gt;&lt;script&gt;x&lt;/script&gt;"' in box


def test_runs_are_found_by_detail_query_agent_source_and_failure_type(operator_client):
    by_detail = make_failure("timeout", detail="ReadTimeout from the film archive")
    by_query = make_run(attempted={"query": "Quarterly Filmography 2024"})
    by_agent = make_run(agent="Scout-7")
    by_source = make_run(source="archive_api")
    rate = make_failure("rate_limited", detail="429 slow down")
    make_run(agent="other", detail="")
    assert hits(get(operator_client, "readtimeout").content.decode(), "runs") == [
        f"Run #{by_detail.pk}"
    ]
    assert hits(get(operator_client, "filmography").content.decode(), "runs") == [
        f"Run #{by_query.pk}"
    ]
    assert hits(get(operator_client, "scout-7").content.decode(), "runs") == [f"Run #{by_agent.pk}"]
    assert hits(get(operator_client, "ARCHIVE_API").content.decode(), "runs") == [
        f"Run #{by_source.pk}"
    ]
    # An alias of a failure type reads as its category.
    assert f"Run #{rate.pk}" in hits(get(operator_client, "rate_limit").content.decode(), "runs")


def test_runs_older_than_the_window_are_left_to_the_runs_page(operator_client):
    make_failure(detail="ancient outage", created_at=ago(days=8))
    html = get(operator_client, "ancient outage").content.decode()
    assert hits(html, "runs") == []
    assert "/runs/?q=ancient+outage&amp;range=7d" in html


def test_review_items_are_found_by_reason_facets_and_their_runs_text(operator_client):
    by_reason = make_review(reason="Credentials for the news desk expired")
    run = make_failure("auth_failure", attempted={"query": "box office receipts"}, detail="401")
    by_run = make_review(run=run, reason="auth failure escalated")
    by_agent = make_review(run=make_failure(agent="Night-Watch"), reason="x")
    assert hits(get(operator_client, "news desk").content.decode(), "reviews") == [
        f"Review #{by_reason.pk}"
    ]
    assert hits(get(operator_client, "box office").content.decode(), "reviews") == [
        f"Review #{by_run.pk}"
    ]
    assert hits(get(operator_client, "night-watch").content.decode(), "reviews") == [
        f"Review #{by_agent.pk}"
    ]


def test_workflows_are_found_by_name_and_goal(operator_client):
    named = make_workflow(name="Streaming economics review")
    goal = make_workflow(name="wf", goal="How do royalties flow to session musicians?")
    make_workflow(name="unrelated")
    assert hits(get(operator_client, "streaming econ").content.decode(), "workflows") == [
        "Streaming economics review"
    ]
    assert hits(get(operator_client, "royalties").content.decode(), "workflows") == ["wf"]
    assert goal.pk != named.pk


def test_failure_groups_are_found_by_pattern_signature_source_and_type(operator_client):
    group = make_group(signature="feedbeef" * 4, pattern="SSLError: certificate expired")
    other = make_group(
        signature="0123abcd" * 4,
        source="scholar_api",
        failure_type="server_fault",
        pattern="HTTP 503 from the upstream",
    )
    for text in ("certificate expired", "feedbeef", "news_api", "timeout"):
        found = hits(get(operator_client, text).content.decode(), "groups")
        assert found == [f"Group #{group.pk}"], text
    assert hits(get(operator_client, "server_fault").content.decode(), "groups") == [
        f"Group #{other.pk}"
    ]


def test_a_number_shows_each_kinds_object_with_that_id_first(operator_client):
    run = make_run()
    later = make_failure(detail=f"upstream said no (run {run.pk})")
    workflow = make_workflow()
    html = get(operator_client, f"#{run.pk}").content.decode()
    assert hits(html, "runs")[0] == f"Run #{run.pk}"
    assert 'title="The text is this one\'s id">id</span>' in section(html, "runs")
    html = get(operator_client, str(run.pk)).content.decode()
    assert hits(html, "runs") == [f"Run #{run.pk}", f"Run #{later.pk}"]
    if workflow.pk == run.pk:
        assert hits(html, "workflows")[0] == workflow.name


def test_a_kind_and_an_id_open_that_objects_page(operator_client):
    run = make_run()
    item = make_review()
    workflow = make_workflow()
    group = make_group()
    expected = {
        f"run {run.pk}": f"/runs/{run.pk}/",
        f"Run #{run.pk}": f"/runs/{run.pk}/",
        f"review {item.pk}": f"/review/{item.pk}/",
        f"workflow:{workflow.pk}": f"/workflows/{workflow.pk}/",
        f"group {group.pk}": f"/groups/{group.pk}/",
    }
    for text, page in expected.items():
        response = get(operator_client, text)
        assert response.status_code == 302 and response["Location"] == page, text
    # No such run: the page says so instead of a dead end.
    response = get(operator_client, "run 999999")
    assert response.status_code == 200 and "No runs match" in response.content.decode()


def test_sections_are_paged_each_on_its_own(operator_client):
    runs = [
        make_failure(detail=f"Broken pipe #{i}", created_at=ago(minutes=30 - i)) for i in range(13)
    ]
    workflows = [make_workflow(name=f"Broken pipe study {i}") for i in range(12)]
    html = get(operator_client, "broken pipe").content.decode()
    newest = [f"Run #{r.pk}" for r in reversed(runs)]
    assert hits(html, "runs") == newest[:10]
    assert len(hits(html, "workflows")) == 10
    more = re.search(r'href="(\?[^"]*runs=[^"]+)"[^>]*rel="next"', section(html, "runs")).group(1)
    page2 = operator_client.get("/search/" + more.replace("&amp;", "&")).content.decode()
    assert hits(page2, "runs") == newest[10:]
    assert 'rel="next"' not in section(page2, "runs")
    assert 'rel="first"' in section(page2, "runs")
    # The workflows' section is still on its first page, with its own "more".
    assert hits(page2, "workflows") == hits(html, "workflows")
    assert 'rel="next"' in section(page2, "workflows")
    assert len(workflows) == 12


def test_a_more_link_through_htmx_swaps_its_section_alone(operator_client):
    for i in range(12):
        make_failure(detail=f"Connection reset {i}", created_at=ago(minutes=20 - i))
    make_workflow(name="Connection reset drill")
    html = get(operator_client, "connection reset").content.decode()
    more = re.search(r'href="(\?[^"]*runs=[^"]+)"[^>]*rel="next"', section(html, "runs")).group(1)
    response = operator_client.get(
        "/search/" + more.replace("&amp;", "&"),
        headers={"HX-Request": "true", "HX-Target": "search-runs"},
    )
    body = response.content.decode()
    assert response.status_code == 200 and "<html" not in body
    assert body.strip().startswith('<section class="search-section" id="search-runs"')
    assert len(hits(body, "runs")) == 2 and 'id="search-workflows"' not in body


def test_a_damaged_more_link_is_refused_with_a_message(operator_client):
    response = get(operator_client, "x", runs="not-a-cursor")
    assert response.status_code == 400
    assert "This “more” link is damaged" in response.content.decode()


def test_agent_text_is_escaped_in_every_section(operator_client):
    run = make_failure(agent=HOSTILE_SCRIPT, detail=f"pwned {HOSTILE_IMG}")
    make_review(run=run, reason=f"pwned {HOSTILE_SCRIPT}")
    make_workflow(name=f"pwned {HOSTILE_SCRIPT}", goal=HOSTILE_IMG)
    make_group(pattern=f"pwned {HOSTILE_IMG}")
    html = get(operator_client, "pwned").content.decode()
    for kind in ("runs", "reviews", "workflows", "groups"):
        assert len(hits(html, kind)) == 1, kind
    assert HOSTILE_SCRIPT not in html and HOSTILE_IMG not in html
    assert "&lt;script&gt;alert(&#x27;pwned&#x27;)&lt;/script&gt;" in html
    # The text typed is hostile too.
    html = get(operator_client, HOSTILE_SCRIPT).content.decode()
    assert HOSTILE_SCRIPT not in html


def test_a_user_sees_only_the_sections_they_may_see(db):
    from django.test import Client

    user = User.objects.create_user("vera", password="viewer-pass-123")
    user.user_permissions.add(Permission.objects.get(codename="view_run"))
    client = Client()
    client.force_login(user)
    make_failure(detail="visible detail")
    make_workflow(name="visible detail")
    html = get(client, "visible detail").content.decode()
    assert section(html, "runs") and section(html, "groups")
    assert not section(html, "workflows") and not section(html, "reviews")


def test_an_empty_search_explains_itself(operator_client):
    html = operator_client.get("/search/").content.decode()
    assert "Type what you are looking for" in html


# PostgreSQL: the same answers through the search table and the trigram indexes


@pytest.mark.parametrize("walk_above", [0, 1_000_000], ids=["walk", "trigram"])
def test_postgres_finds_runs_and_review_items_both_ways(
    postgres, operator_client, settings, walk_above
):
    """Whether the text is judged common (walk the newest) or rare (start from the trigram
    matches), the same runs and review items are found; runs the fill has not read yet too."""
    settings.RUN_SEARCH_WALK_ABOVE = walk_above
    old = make_failure(detail="TLS handshake failure at the edge", created_at=ago(hours=2))
    item = make_review(run=make_failure(attempted={"query": "TLS handshake census"}))
    make_failure(detail="unrelated")
    run_search.catch_up()
    fresh = make_failure(detail="tls handshake failure again")  # after the fill
    html = get(operator_client, "TLS handshake").content.decode()
    assert hits(html, "runs") == [f"Run #{fresh.pk}", f"Run #{item.run_id}", f"Run #{old.pk}"]
    assert hits(html, "reviews") == [f"Review #{item.pk}"]


def test_postgres_has_trigram_indexes_for_the_searched_text(postgres):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE indexdef LIKE '%%gin_trgm_ops%%'"
            " AND tablename IN ('orchestrator_workflow', 'orchestrator_reviewitem',"
            " 'dashboard_failuregroup')"
        )
        names = {row[0] for row in cursor.fetchall()}
    assert names == {
        "workflow_name_trgm",
        "workflow_goal_trgm",
        "reviewitem_reason_trgm",
        "failuregroup_pattern_trgm",
        "failuregroup_example_trgm",
    }


def test_each_hit_links_to_its_own_page(operator_client):
    run = make_failure("timeout", detail="lighthouse outage")
    item = make_review(make_failure("timeout", detail="lighthouse outage again"))
    workflow = make_workflow(name="lighthouse survey")
    group = make_group(pattern="lighthouse outage <n>")
    html = get(operator_client, "lighthouse").content.decode()
    expected = {
        "runs": f"/runs/{run.pk}/",
        "reviews": f"/review/{item.pk}/",
        "workflows": f"/workflows/{workflow.pk}/",
        "groups": f"/groups/{group.pk}/",
    }
    for kind, href in expected.items():
        links = re.findall(r'<li class="hit[^"]*">.*?<a href="([^"]+)">', section(html, kind), re.S)
        assert href in links, (kind, links)
        assert operator_client.get(href).status_code == 200, href


@pytest.mark.parametrize("few_runs", [200, 1], ids=["by-id", "searched-again"])
def test_postgres_a_rare_texts_runs_are_those_of_the_chosen_project_both_ways(
    postgres, operator, settings, monkeypatch, few_runs
):
    """A rare text's runs are read once for the review items (every project's) and, when few,
    serve the runs section by id; past FEW_RUNS the section searches again. Either way the
    runs section holds the chosen project's runs only, newest first, and pages through them."""
    from dashboard import finder
    from orchestrator.models import Project

    from .conftest import signed_in
    from .test_projects import switch

    settings.RUN_SEARCH_WALK_ABOVE = 1_000_000  # rare: start from the trigram matches
    monkeypatch.setattr(finder, "FEW_RUNS", few_runs)
    acme = Project.objects.create(slug="acme", name="Acme")
    ours = [
        make_failure(detail=f"quokka-7 gone {i}", project=acme, created_at=ago(minutes=20 - i))
        for i in range(12)
    ]
    theirs = make_failure(detail="quokka-7 gone too")
    item = make_review(run=theirs)
    run_search.catch_up()
    client = signed_in(operator)
    html = get(client, "quokka-7").content.decode()
    assert f"Run #{theirs.pk}" in hits(html, "runs")
    assert hits(html, "reviews") == [f"Review #{item.pk}"]

    switch(client, acme)
    html = get(client, "quokka-7").content.decode()
    newest = [f"Run #{r.pk}" for r in reversed(ours)]
    assert hits(html, "runs") == newest[:10] and hits(html, "reviews") == []
    more = re.search(r'href="(\?[^"]*runs=[^"]+)"[^>]*rel="next"', section(html, "runs")).group(1)
    page2 = client.get("/search/" + more.replace("&amp;", "&")).content.decode()
    assert hits(page2, "runs") == newest[10:]


def test_postgres_a_rare_texts_runs_are_read_as_far_as_a_section_needs(
    postgres, operator, settings, monkeypatch, django_assert_num_queries
):
    """The runs section reads one run past FEW_RUNS; the review section reads on only when it
    is shown and that first read was cut short, so an item whose run is the oldest match is
    still found, and a page of a text with few runs reads them once."""
    from dashboard import finder

    from .conftest import signed_in

    settings.RUN_SEARCH_WALK_ABOVE = 1_000_000  # rare: start from the trigram matches
    monkeypatch.setattr(finder, "FEW_RUNS", 2)
    oldest = make_failure(detail="okapi-3 lost", created_at=ago(minutes=30))
    for i in range(5):
        make_failure(detail=f"okapi-3 lost {i}", created_at=ago(minutes=20 - i))
    item = make_review(run=oldest)
    run_search.catch_up()
    now = timezone.now()
    since = now - finder.RUNS_WINDOW
    query = finder.read("okapi-3", now)
    assert len(finder._rare_runs(query, since, 3)) == 3  # cut at what was asked
    assert len(finder._rare_runs(query, since)) == 6  # cut short before: read again, whole
    with django_assert_num_queries(0):
        assert len(finder._rare_runs(query, since, 3)) == 3  # within what was read
        assert len(finder._rare_runs(query, since)) == 6
    html = get(signed_in(operator), "okapi-3").content.decode()
    assert hits(html, "reviews") == [f"Review #{item.pk}"]
