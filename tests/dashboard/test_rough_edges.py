"""The small rough edges a new user found: the favicon, the policy version, the coverage badge,
the analytics pages missing from the menu, a retry "in 0 minutes"."""

from __future__ import annotations

import re
from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import PolicyState, RoutingPolicy, Run

from .conftest import make_failure, make_run, make_workflow


def test_favicon_ico_is_served(client, db):
    response = client.get("/favicon.ico", follow=True)
    assert response.redirect_chain[0] == ("/static/favicon.svg", 301)
    assert response.status_code == 200 and response["Content-Type"] == "image/svg+xml"


def test_the_policies_page_shows_the_current_version(editor_client, policy_editor):
    html = editor_client.get(reverse("dashboard:policies")).content.decode()
    before = PolicyState.current_version()
    assert f"Current policy <strong>v{before}</strong>" in html
    policy = RoutingPolicy.objects.get(failure_type="timeout")
    policy.max_attempts = 2
    save_policy_change(policy, policy_editor, "fewer")
    html = editor_client.get(reverse("dashboard:policies")).content.decode()
    assert f"Current policy <strong>v{before + 1}</strong>" in html
    fragment = editor_client.get(
        reverse("dashboard:policies") + "?part=version", HTTP_HX_REQUEST="true"
    ).content.decode()
    assert fragment.lstrip().startswith('<p id="policy-version"') and f"v{before + 1}" in fragment


def test_a_coverage_badge_carries_no_coverage_card_class(operator_client):
    wf = make_workflow(coverage={"film": {"verdict": "thin", "why": "one source"}})
    html = operator_client.get(reverse("dashboard:workflow_detail", args=[wf.pk])).content.decode()
    # The card's border classes on a rounded badge drew a stray "(" (the browser test measures).
    assert '<span class="badge verdict verdict-thin">thinly supported</span>' in html
    assert 'class="badge cov-badge' not in html


def test_switch_efficacy_and_the_retry_audit_are_in_the_menu(operator_client):
    def menu(url: str) -> str:
        html = operator_client.get(url).content.decode()
        return re.search(r'<nav class="mainnav".*?</nav>', html, re.S).group(0)

    efficacy, audit = reverse("dashboard:switch_efficacy"), reverse("dashboard:retry_audit")
    overview = menu(reverse("dashboard:overview"))
    assert f'href="{efficacy}"' in overview and f'href="{audit}"' in overview
    assert "aria-current" not in overview.split(f'href="{efficacy}"')[1].split("</a>")[0]
    assert f'<a href="{efficacy}" aria-current="page"' in menu(efficacy)
    on_audit = menu(audit)
    assert f'<a href="{audit}" aria-current="page"' in on_audit
    slos = reverse("dashboard:slos")
    assert f'<a href="{slos}" aria-current' not in on_audit  # one current page, not two


def test_still_retrying_says_when_in_seconds_not_minutes(operator_client):
    first = make_failure("rate_limited")
    make_run(
        status=Run.Status.QUEUED,
        retry_of=first,
        attempt=2,
        due_at=timezone.now() + timedelta(seconds=40),
    )
    html = operator_client.get(reverse("dashboard:retrying")).content.decode()
    assert re.search(r'<span class="muted">in (39|40) s</span>', html)
    assert "minutes" not in html
