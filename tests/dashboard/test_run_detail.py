"""Run and workflow detail: the envelope in full, escaped; attempts; decisions; coverage."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from orchestrator.coordination import workflow
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
    run = make_failure(
        "auth_failure",
        reported_failure_type="auth_error",
        signal="provider_code",
        provider_code="ExpiredToken",
    )
    html = detail(operator_client, run)
    assert "Failure type sent" in html and "data-reported-failure-type>auth_error<" in html
    assert "(read as auth_failure)" in html
    assert 'Classified by</dt><dd id="classified-by">the provider&#x27;s error code ' in html
    assert "<code><bdi>ExpiredToken</bdi></code>" in html
    plain = detail(operator_client, make_failure("timeout"))
    assert "Failure type sent" not in plain and "Classified by" not in plain


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"signal": "status", "status_code": 429}, "the HTTP status <code><bdi>429</bdi></code>"),
        (
            {"signal": "type", "exception_type": "httpx.ReadTimeout"},
            "the exception&#x27;s class <code><bdi>ReadTimeout</bdi></code>",
        ),
        ({"signal": "message"}, "the wording of the error message"),
        ({"signal": "none"}, "no recognisable signal (kept as unclassified)"),
    ],
)
def test_what_classified_a_failure_is_said_in_words(operator_client, fields, words):
    html = detail(operator_client, make_failure("timeout", **fields))
    assert f'<dd id="classified-by">{words}</dd>' in html
    assert ">type<" not in html and ">status<" not in html


def test_an_agents_report_names_its_evidence_the_same_way(operator_client, api_token):
    run = make_failure("rate_limited", signal="status", status_code=429, token=api_token[0])
    html = detail(operator_client, run)
    assert '<dd id="classified-by">the HTTP status <code><bdi>429</bdi></code></dd>' in html


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


def times(html: str, element_id: str) -> list[datetime]:
    """The datetimes of the <time> elements inside the element with that id."""
    part = re.search(rf'id="{element_id}">(.*?)</dd>', html, re.S)
    assert part, element_id
    return [datetime.fromisoformat(t) for t in re.findall(r'datetime="([^"]+)"', part.group(1))]


def test_the_next_attempt_is_due_after_the_decision_not_when_this_one_was(operator_client):
    # A run due (queued) at t, failed and decided 3 s later, retried after 40 s: the decision
    # card shows the next attempt's due time, never the failed run's own earlier one.
    queued_at = timezone.now() - timedelta(seconds=3)
    run = make_failure("timeout", created_at=queued_at, due_at=queued_at)
    run.finished_at = queued_at + timedelta(seconds=3)
    run.save()
    run.record_decision(Action.RETRY, "timeout: retry", 2, delay=40.0, now=run.finished_at)
    nxt = workflow.retry(run, 40.0)
    html = detail(operator_client, run)
    (decided,) = times(html, "decided")
    (due,) = times(html, "next-attempt")
    assert due >= decided + timedelta(seconds=40)
    assert f"#{nxt.pk}</a> due" in html and re.search(r"\(in (3\d|40) s\)", html)
    assert "Retry after</dt><dd>40 s" in html
    assert 'id="due"' not in html  # a first attempt's own due time is its creation time
    retried = detail(operator_client, nxt)
    assert times(retried, "due") == [due] and "Due to start" in retried


def test_decided_by_names_the_policy_or_the_operator(operator_client, api_token):
    policy = make_failure("rate_limited", decision=Action.RETRY, policy_version=3)
    html = detail(operator_client, policy)
    says = "the policy for rate limited (v3), applied by the built-in coordinator"
    assert f'<dd id="decided-by">{says}</dd>' in html
    reported = make_failure("timeout", decision=Action.ABORT, policy_version=4, token=api_token[0])
    assert "the policy for timeout (v4), asked for by the agent's own coordinator" in detail(
        operator_client, reported
    )
    escalated = make_failure("timeout", decision=Action.RETRY, policy_version=4)
    operator_client.post(
        reverse("dashboard:run_actions"),
        {"action": "escalate", "run": [escalated.pk], "reason": "looks <b>odd</b>"},
    )
    html = detail(operator_client, escalated)
    assert '<dd id="decided-by">an operator (<bdi>olga</bdi>): “<bdi>looks &lt;b&gt;odd' in html


def test_a_switched_run_links_the_run_it_replaced_and_back(operator_client):
    failed = make_failure("resource_missing", source="web_search", decision=Action.SWITCH_SOURCE)
    failed.switch_to = "news_api"
    failed.save()
    replacement = make_run(source="news_api", switched_from=failed)
    html = detail(operator_client, replacement)
    link = reverse("dashboard:run_detail", args=[failed.pk])
    assert re.search(
        rf'id="switched-from">Started in place of run <a href="{link}">#{failed.pk}', html
    )
    assert "web_search" in html
    back = detail(operator_client, failed)
    link = reverse("dashboard:run_detail", args=[replacement.pk])
    assert re.search(rf'id="replaced-by">Replaced by run <a href="{link}">#{replacement.pk}', back)
    assert 'id="switched-from"' not in back and 'id="replaced-by"' not in html


def test_retry_now_is_offered_only_while_a_retry_can_help_the_task(operator_client):
    def offered(run: Run) -> bool:
        return 'value="retry"' in detail(operator_client, run)

    alone = make_failure("timeout")
    recovered = make_failure("timeout", decision=Action.RETRY)
    make_run(retry_of=recovered, attempt=2)
    waiting = make_failure("timeout", decision=Action.RETRY)
    make_run(retry_of=waiting, attempt=2, status=Run.Status.QUEUED)
    first = make_failure("timeout", decision=Action.RETRY)
    second = make_failure("timeout", retry_of=first, attempt=2, decision=Action.SWITCH_SOURCE)
    make_run(source="news_api", switched_from=second)
    assert offered(alone)
    assert not any(offered(run) for run in (recovered, waiting, first, second))
    html = operator_client.get(reverse("dashboard:runs") + "?status=failed").content.decode()
    assert f'value="{alone.pk}" data-actions="retry escalate"' in html
    assert f'value="{recovered.pk}" data-actions="escalate"' in html
    # Asked anyway (a stale page, a crafted post): the task gets no second attempt.
    response = operator_client.post(
        reverse("dashboard:run_actions"),
        {"action": "retry", "run": [recovered.pk, first.pk], "confirmed": "1"},
        follow=True,
    )
    assert "Retry: 0 runs done, 2 skipped" in response.content.decode()
    assert Run.objects.attempts_of(recovered).count() == 2
    assert Run.objects.attempts_of(first).count() == 2


def test_one_request_retries_a_task_once_even_when_two_of_its_attempts_are_chosen(
    operator_client,
):
    first = make_failure("timeout", decision=Action.RETRY)
    second = make_failure("timeout", retry_of=first, attempt=2)
    operator_client.post(
        reverse("dashboard:run_actions"),
        {"action": "retry", "run": [first.pk, second.pk], "confirmed": "1"},
    )
    assert Run.objects.attempts_of(first).count() == 3


def test_a_failed_run_with_partial_results_does_not_say_results_0_alone(operator_client):
    run = make_failure("timeout", partial_results=[1, 2, 3], partial_count=3)
    html = detail(operator_client, run)
    assert re.search(r"<dt>Results</dt><dd>none complete · 3 partial \(below\)", html), html


def test_the_budget_spent_by_a_retry_says_it_is_that_retrys_cost(operator_client):
    run = make_failure("timeout", decision=Action.RETRY, budget_spent=5)
    html = detail(operator_client, run)
    assert "5 tokens taken from the retry budget of" in html
    assert "this one retry" in html


def test_a_workflow_without_a_coverage_report_offers_no_download(operator_client):
    wf = make_workflow(status="running")
    html = operator_client.get(reverse("dashboard:workflow_detail", args=[wf.pk])).content.decode()
    assert "No coverage report yet" in html and "Download the report" not in html
