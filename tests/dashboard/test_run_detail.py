"""Run and workflow detail: the envelope in full, escaped; attempts; decisions; coverage."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse

from orchestrator.models import Run
from orchestrator.vocabulary import Action

from .conftest import (
    HOSTILE_IMG,
    HOSTILE_SCRIPT,
    make_failure,
    make_run,
    make_workflow,
    signed_in,
)


def detail(client, run: Run) -> str:
    return client.get(reverse("dashboard:run_detail", args=[run.pk])).content.decode()


def test_the_envelope_is_shown_in_full(operator_client):
    run = make_failure(
        "rate_limited",
        retryable=True,
        retry_after=2.5,
        status_code=429,
        provider_code="SlowDown",
        exception_type="botocore.exceptions.ClientError",
        attempted={"operation": "web_search", "query": "AI film"},
        partial_results=[{"url": "https://a.example", "excerpt": "three of five"}],
        partial_count=1,
        alternatives=["use news_api instead"],
        detail="429 Too Many Requests",
        exception_chain=[{"type": "ClientError", "message": "SlowDown"}],
        decision=Action.RETRY,
        decision_reason="rate limited: wait for Retry-After",
        policy_version=7,
    )
    html = detail(operator_client, run)
    for text in (
        "429",
        "SlowDown",
        "botocore.exceptions.ClientError",
        "2.5 s",
        "three of five",
        "use news_api instead",
        "429 Too Many Requests",
        "&quot;ClientError&quot;",
        "rate limited: wait for Retry-After",
        "v7",
    ):
        assert text in html, text


def test_the_failure_type_as_sent_and_the_deciding_signal_are_shown(operator_client):
    run = make_failure("auth_failure", reported_failure_type="auth_error", signal="provider_code")
    html = detail(operator_client, run)
    assert "Failure type sent" in html and "data-reported-failure-type>auth_error<" in html
    assert "(read as auth_failure)" in html and "provider code" in html
    plain = detail(operator_client, make_failure("timeout"))
    assert "Failure type sent" not in plain and "Decided by" not in plain


def test_a_hostile_failure_type_as_sent_is_escaped(operator_client):
    run = make_failure("timeout", reported_failure_type=HOSTILE_SCRIPT[:50])
    html = detail(operator_client, run)
    assert HOSTILE_SCRIPT[:50] not in html and "&lt;script&gt;" in html


def test_hostile_agent_content_is_escaped_everywhere(operator_client):
    run = make_failure(
        "unclassified",
        detail=HOSTILE_SCRIPT + HOSTILE_IMG,
        attempted={"query": HOSTILE_IMG},
        partial_results=[{"excerpt": HOSTILE_SCRIPT}],
        alternatives=[HOSTILE_IMG],
        exception_chain=[{"message": HOSTILE_SCRIPT}],
        agent="<b>agent</b>",
        source="<i>src</i>",
        decision_reason=HOSTILE_IMG,
        workflow=make_workflow(name=HOSTILE_SCRIPT),
    )
    for url in (
        reverse("dashboard:run_detail", args=[run.pk]),
        reverse("dashboard:runs"),
        reverse("dashboard:workflow_detail", args=[run.workflow_id]),
    ):
        html = operator_client.get(url).content.decode()
        assert "<script>alert" not in html, url
        assert "<img src=x" not in html, url
        assert "<b>agent</b>" not in html and "<i>src</i>" not in html, url
        assert "&lt;script&gt;" in html or "&lt;img" in html, url


def test_pages_send_a_csp_without_unsafe_inline(operator_client):
    make_run()
    response = operator_client.get(reverse("dashboard:runs"))
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    html = response.content.decode()
    assert "<script>" not in html and " onclick=" not in html and " style=" not in html


def test_the_body_carries_the_csrf_token_for_htmx(operator_client):
    html = operator_client.get(reverse("dashboard:runs")).content.decode()
    assert 'hx-headers=\'{"X-CSRFToken": "' in html


def test_the_attempts_timeline_shows_each_retry_its_wait_and_decision(operator_client):
    first = make_failure(
        "timeout", decision=Action.RETRY, decision_reason="timeout: retry", policy_version=3
    )
    first.finished_at = first.created_at
    first.save()
    second = make_failure(
        "timeout",
        retry_of=first,
        attempt=2,
        started_at=first.created_at + timedelta(seconds=4),
        decision=Action.SWITCH_SOURCE,
        decision_reason="attempts exhausted",
        policy_version=4,
    )
    html = detail(operator_client, second)
    assert f"#{first.pk}" in html and f"#{second.pk}" in html
    assert "waited 4 s" in html
    assert "timeout: retry" in html and "attempts exhausted" in html
    assert "policy v3" in html and "policy v4" in html


def test_actions_are_shown_only_to_reviewers(operator_client, outsider, db):
    from django.contrib.auth.models import Permission

    from .conftest import signed_in

    run = make_failure("timeout")
    assert 'value="retry"' in detail(operator_client, run)
    outsider.user_permissions.add(Permission.objects.get(codename="view_run"))
    assert 'value="retry"' not in detail(signed_in(outsider), run)


def test_workflow_detail_shows_its_coverage_and_timeline(operator_client):
    wf = make_workflow(
        status="degraded",
        coverage={
            "film": {
                "verdict": "well_supported",
                "why": "film is well supported by 2 sources",
                "sources": [{"source": "web_search", "state": "supported", "results": 3}],
                "runs": [1],
            },
            "music": {"verdict": "gap", "why": "music could not be assessed: news_api (timeout)"},
            "games": {"verdict": "empty", "why": "No results on games were found"},
            "odd": "something unexpected",
        },
    )
    run = make_run(workflow=wf, topic="film")
    html = operator_client.get(reverse("dashboard:workflow_detail", args=[wf.pk])).content.decode()
    assert "well supported" in html and "cov-gap" in html and "cov-empty" in html
    assert "music could not be assessed: news_api (timeout)" in html
    assert "cov-unknown" in html  # unexpected shapes render, they do not crash
    assert f"#{run.pk}" in html and "Degraded" in html


def test_workflows_list_filters_by_status(operator_client):
    make_workflow(name="ok one", status="succeeded")
    make_workflow(name="bad one", status="degraded")
    html = operator_client.get(reverse("dashboard:workflows") + "?status=degraded").content.decode()
    assert "bad one" in html and "ok one" not in html


def test_an_operator_aborts_a_workflow_with_a_reason_that_is_audited(operator_client, operator):
    from orchestrator.models import AuditEntry, Workflow

    wf = make_workflow(status=Workflow.Status.AWAITING_REVIEW)
    pending = make_run(workflow=wf, status=Run.Status.QUEUED)
    done = make_run(workflow=wf, status=Run.Status.SUCCEEDED)
    url = reverse("dashboard:workflow_abort", args=[wf.pk])
    page = operator_client.get(reverse("dashboard:workflow_detail", args=[wf.pk])).content
    assert url.encode() in page  # the form is offered to a reviewer

    no_reason = operator_client.post(url, {"note": "   "}, follow=True)
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.AWAITING_REVIEW
    assert "Say why" in no_reason.content.decode()

    response = operator_client.post(url, {"note": "source retired; <b>stop</b>"}, follow=True)
    assert "Workflow aborted" in response.content.decode()
    wf.refresh_from_db()
    pending.refresh_from_db()
    done.refresh_from_db()
    assert wf.status == Workflow.Status.FAILED and wf.finished_at is not None
    assert (pending.status, done.status) == (Run.Status.CANCELLED, Run.Status.SUCCEEDED)
    entry = AuditEntry.objects.get(action="workflow.abort", object_id=str(wf.pk))
    assert entry.actor == operator
    html = response.content.decode()
    assert "&lt;b&gt;stop&lt;/b&gt;" in html and "<b>stop</b>" not in html  # shown, escaped
    again = operator_client.post(url, {"note": "twice"}, follow=True)
    assert "already finished" in again.content.decode()
    assert AuditEntry.objects.filter(action="workflow.abort").count() == 1


def test_aborting_needs_the_review_permission_and_a_post(operator_client, outsider):
    from django.contrib.auth.models import Permission

    from orchestrator.models import Workflow

    wf = make_workflow(status=Workflow.Status.RUNNING)
    url = reverse("dashboard:workflow_abort", args=[wf.pk])
    detail_url = reverse("dashboard:workflow_detail", args=[wf.pk])
    assert operator_client.get(url).status_code == 405
    assert url.encode() in operator_client.get(detail_url).content  # a reviewer sees the form
    outsider_client = signed_in(outsider)
    assert outsider_client.post(url, {"note": "no"}).status_code == 403
    # May read runs and workflows, not review: the page renders, without the abort form.
    for codename in ("view_run", "view_workflow"):
        outsider.user_permissions.add(Permission.objects.get(codename=codename))
    page = signed_in(outsider).get(detail_url)
    assert page.status_code == 200
    assert url.encode() not in page.content
    assert outsider_client.post(url, {"note": "no"}).status_code == 403
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.RUNNING


def test_the_trace_is_shown_and_links_to_its_runs_and_the_tracing_tool(operator_client, settings):
    trace, span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    run = make_failure("timeout", trace_id=trace, span_id=span)
    settings.TRACE_URL_TEMPLATE = "https://jaeger.example/trace/{trace_id}?uiFind={span_id}"
    html = detail(operator_client, run)
    assert f'href="{reverse("dashboard:runs")}?trace_id={trace}"' in html
    assert f'href="https://jaeger.example/trace/{trace}?uiFind={span}"' in html
    assert span in html
    settings.TRACE_URL_TEMPLATE = ""
    html = detail(operator_client, run)
    assert trace in html and "Open in the tracing tool" not in html
    assert 'id="trace"' not in detail(operator_client, make_failure("timeout"))


@pytest.mark.parametrize(
    "value", ["jaeger.example/trace/{trace_id}", "javascript:alert('{trace_id}')", "https://x/"]
)
def test_a_trace_url_template_that_cannot_link_a_trace_is_refused(monkeypatch, value):
    from django.core.exceptions import ImproperlyConfigured

    from config.settings import env_trace_url

    monkeypatch.setenv("TRACE_URL_TEMPLATE", value)
    with pytest.raises(ImproperlyConfigured):
        env_trace_url("TRACE_URL_TEMPLATE")
    monkeypatch.setenv("TRACE_URL_TEMPLATE", "http://tempo:3200/trace/{trace_id}")
    assert env_trace_url("TRACE_URL_TEMPLATE") == "http://tempo:3200/trace/{trace_id}"
