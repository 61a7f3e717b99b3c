"""Agent text is isolated: every string an agent sent renders inside <bdi>, on every page.

A bidirectional control character (U+202E, right-to-left override) in a source name would make
"attempt 1" read "1 tpmetta" around it; inside <bdi> it cannot reach past its own string. This
test reads the HTML of every page showing agent text and finds each text node that carries the
character: each must sit inside a <bdi>. (tests/dashboard/test_browser.py checks, in Chromium,
that the text around stays in order.)
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.urls import reverse

from insights import groups
from insights.models import FailureGroup
from orchestrator.models import ProviderOverride, Run

from .conftest import make_failure, make_review, make_run, make_workflow

RLO = "\u202e"
VOID = {"area", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class BareText(HTMLParser):
    """Collects the text nodes holding RLO that no <bdi> encloses."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.bare: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.stack:
            while self.stack.pop() != tag:
                pass

    def handle_data(self, data: str) -> None:
        if RLO in data and "bdi" not in self.stack and "title" not in self.stack:
            self.bare.append(f"{'>'.join(self.stack[-4:])}: {data.strip()[:60]!r}")


def bare_text(html: str) -> list[str]:
    parser = BareText()
    parser.feed(html)
    return parser.bare


@pytest.fixture
def hostile(db, operator):
    wf = make_workflow(name=f"digest{RLO}reversed", capability="news", goal=f"goal{RLO}x")
    run = make_failure(
        "timeout",
        workflow=wf,
        agent=f"agent{RLO}x",
        source=f"news{RLO}api",
        topic=f"film{RLO}x",
        operation=f"op{RLO}x",
        provider_code=f"code{RLO}x",
        exception_type=f"Err{RLO}x",
        detail=f"file{RLO}gnp.exe",
        decision="retry",
        decision_reason=f"retrying news{RLO}api",
        attempted={"query": f"q{RLO}x"},
        alternatives=[f"alt{RLO}x"],
        partial_results=[{"excerpt": f"p{RLO}x"}],
    )
    make_run(
        status=Run.Status.QUEUED,
        retry_of=run,
        attempt=2,
        workflow=wf,
        agent=run.agent,
        source=run.source,
        due_at=run.created_at,
    )
    item = make_review(run, reason=f"escalated: file{RLO}gnp.exe")
    wf.coverage = {
        run.topic: {
            "verdict": "gap",
            "why": f"news{RLO}api could not be reached",
            "sources": [{"source": run.source, "state": "failed", "failure_types": ["timeout"]}],
            "runs": [run.pk],
        }
    }
    wf.coverage_summary = f"1 gap (gaps: film{RLO}x)"
    wf.save()
    ProviderOverride.objects.create(
        provider=run.source,
        match_on="provider_code",
        match_value=f"code{RLO}x",
        failure_type="timeout",
    )
    groups.fold()
    return {"run": run, "item": item, "workflow": wf, "group": FailureGroup.objects.get()}


def test_the_check_finds_bare_text():
    assert len(bare_text(f"<p>attempt <b>1</b> news{RLO}api</p>")) == 1
    assert bare_text(f"<p>attempt <bdi>news{RLO}api</bdi> 1<br></p>") == []


def test_every_page_isolates_what_an_agent_sent(hostile, operator, policy_editor):
    from .conftest import signed_in

    client = signed_in(operator)
    client.force_login(operator)
    pages = [
        reverse("dashboard:run_detail", args=[hostile["run"].pk]),
        reverse("dashboard:runs"),
        reverse("dashboard:runs") + "?source=news",
        reverse("dashboard:retrying"),
        reverse("dashboard:workflows"),
        reverse("dashboard:workflow_detail", args=[hostile["workflow"].pk]),
        reverse("dashboard:review_queue"),
        reverse("dashboard:review_queue") + "?view=groups",
        reverse("dashboard:review_item", args=[hostile["item"].pk]),
        reverse("dashboard:failure_groups"),
        reverse("dashboard:failure_group", args=[hostile["group"].pk]),
        reverse("dashboard:overview"),
    ]
    for page in pages:
        response = client.get(page)
        html = response.content.decode()
        assert response.status_code == 200, page
        assert bare_text(html) == [], page
    claimed = client.post(
        reverse("dashboard:review_claim", args=[hostile["item"].pk]), HTTP_HX_REQUEST="true"
    )
    assert bare_text(claimed.content.decode()) == []
    policies = signed_in(policy_editor).get(reverse("dashboard:policies")).content.decode()
    assert bare_text(policies) == [] and f"code{RLO}x" in policies


def test_the_page_says_which_controls_a_run_carries_and_shows_them_as_written(
    hostile, operator_client
):
    html = operator_client.get(
        reverse("dashboard:run_detail", args=[hostile["run"].pk])
    ).content.decode()
    assert "U+202E right-to-left override" in html
    assert 'As written: <code class="as-written">file\\u202egnp.exe</code>' in html
    assert "&quot;query&quot;: &quot;q\\u202ex&quot;" in html  # JSON writes it as its escape
    assert f"<title>Run #{hostile['run'].pk}" in html


def test_a_title_drops_the_controls(hostile, operator_client):
    html = operator_client.get(
        reverse("dashboard:workflow_detail", args=[hostile["workflow"].pk])
    ).content.decode()
    assert "<title>digestreversed · Failsight</title>" in html
