"""What operators see of agents' own coordinators: runs in flight with their age, a decision an
agent asked for on the run's page, whether and when an agent picked a resolution up, and the kind
of a workflow."""

from __future__ import annotations

from django.urls import reverse
from django.utils import timezone

from orchestrator.coordination import workflow as coordination
from orchestrator.coordination.actions import do_resolve_review
from orchestrator.models import ApiToken, Run, Workflow
from orchestrator.vocabulary import Channel, Coordinator, Delivery

from .conftest import HOSTILE_SCRIPT, ago, make_failure, make_review, make_run, signed_in


def test_the_in_flight_view_shows_each_running_run_with_its_age(operator, outsider):
    token, _ = ApiToken.issue("crm-agent")
    reported = make_run(
        status=Run.Status.RUNNING, token=token, agent=HOSTILE_SCRIPT, created_at=ago(minutes=7)
    )
    worker = make_run(
        status=Run.Status.RUNNING,
        created_at=ago(minutes=2),
        lease_owner="host:42",
        lease_until=timezone.now(),
    )
    make_run()  # finished: not in flight
    html = signed_in(operator).get(reverse("dashboard:in_flight")).content.decode()
    rows = html.split('data-run="')[1:]
    assert [int(r.split('"')[0]) for r in rows] == [reported.pk, worker.pk]  # oldest first
    assert "7 m" in rows[0] and "the agent (it finishes the run)" in rows[0]
    assert "host:42" in rows[1] and "the built-in coordinator" in rows[1]
    assert HOSTILE_SCRIPT not in html
    fragment = signed_in(operator).get(reverse("dashboard:in_flight"), HTTP_HX_REQUEST="true")
    assert b"<html" not in fragment.content and b'id="in-flight"' in fragment.content
    assert signed_in(outsider).get(reverse("dashboard:in_flight")).status_code == 403


def test_the_overview_links_to_the_runs_in_flight(operator):
    make_run(status=Run.Status.RUNNING, created_at=ago(minutes=3))
    html = signed_in(operator).get(reverse("dashboard:overview")).content.decode()
    tile = html[html.index('data-tile="in_flight"') :].split('data-tile="', 2)[1]
    assert reverse("dashboard:in_flight") in tile and "longest running 3 m" in tile


def test_a_decision_an_agent_asked_for_shows_on_the_run_page(operator):
    token, _ = ApiToken.issue("crm-agent")
    run = make_failure("timeout", token=token, source="slow_api", retryable=True)
    decided, _ = coordination.decide_reported(run)
    assert decided
    html = signed_in(operator).get(reverse("dashboard:run_detail", args=[run.pk])).content
    html = html.decode()
    decision = html[html.index("<h2>Decision</h2>") :]
    assert "the policy for timeout (v1), asked for by the agent's own coordinator" in decision
    assert "10 tokens taken from the retry budget of" in decision and "Retry after" in decision
    timeline = html[html.index("Attempts of this task") :]
    assert "asked by the agent" in timeline and "10 budget tokens" in timeline


def test_the_review_pages_say_whether_and_when_the_agent_picked_it_up(operator):
    token, _ = ApiToken.issue("crm-agent")
    run = make_failure("auth_failure", token=token)
    item = make_review(run)
    do_resolve_review(item, operator, "abort", channel=Channel.DASHBOARD, note="stop")
    page = reverse("dashboard:review_item", args=[item.pk])
    assert "not picked up yet" in signed_in(operator).get(page).content.decode()
    item.acknowledge(Delivery.ACK)
    html = signed_in(operator).get(page).content.decode()
    assert 'data-delivered="yes"' in html and "Picked up by the agent" in html
    resolved = signed_in(operator).get(reverse("dashboard:review_queue") + "?state=resolved")
    assert "picked up by the agent (ack)" in resolved.content.decode()
    run_page = signed_in(operator).get(reverse("dashboard:run_detail", args=[run.pk]))
    assert "Picked up by the agent" in run_page.content.decode()


def test_workflow_pages_show_who_coordinates_each_kind(operator):
    external = Workflow.objects.create(
        name="agent research", topics=["t"], coordinator=Coordinator.EXTERNAL
    )
    built_in = Workflow.objects.create(name="built-in research", topics=["t"], capability="search")
    client = signed_in(operator)
    for wf, kind in ((external, "agent's own coordinator"), (built_in, "built-in coordinator")):
        html = client.get(reverse("dashboard:workflow_detail", args=[wf.pk])).content.decode()
        assert f"Coordinated by the {kind}".replace("'", "&#x27;") in html
    listing = client.get(reverse("dashboard:workflows")).content.decode()
    assert "agent-reported" in listing and "built-in" in listing


def test_an_agents_recorded_decision_is_counted_by_the_tiles_and_metrics(db, client, settings):
    from datetime import timedelta

    from insights.stats import WINDOWS, refresh_rollups, window_stats

    settings.METRICS_ALLOWED_IPS = ["127.0.0.1"]
    token, _ = ApiToken.issue("crm-agent")
    run = make_failure("auth_failure", token=token, source="crm_api", created_at=ago(hours=2))
    assert coordination.decide_reported(run)[1] is not None  # escalated: a retry avoided
    refresh_rollups(timezone.now() - timedelta(hours=4))  # the periodic fold, as beat runs it
    body = client.get(reverse("metrics")).content.decode()
    line = next(x for x in body.splitlines() if x.startswith("failsight_avoided_retries_total"))
    assert float(line.rsplit(" ", 1)[1]) == 1, body
    assert window_stats(WINDOWS["24h"]).current.metric["avoided_retries"] == 1
