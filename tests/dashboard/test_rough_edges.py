"""The small rough edges a new user found: the favicon, the policy version, the coverage badge."""

from __future__ import annotations

from django.urls import reverse

from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import PolicyState, RoutingPolicy

from .conftest import make_workflow


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
