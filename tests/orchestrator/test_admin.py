"""The admin and the createtoken command: policy edits are validated, versioned and audited;
token secrets are shown once and never stored."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command
from django.urls import reverse

from orchestrator.coordination.actions import do_resolve_review
from orchestrator.models import (
    ApiToken,
    AuditEntry,
    PolicyState,
    PolicyVersion,
    ProviderOverride,
    RoutingPolicy,
)
from orchestrator.vocabulary import Channel

pytestmark = pytest.mark.django_db


def policy_form(policy: RoutingPolicy, **changes) -> dict:
    data = policy.snapshot() | changes
    return {k: ("on" if v is True else "" if v is False else v) for k, v in data.items()}


def test_createtoken_prints_only_a_secret_that_authenticates():
    out = io.StringIO()
    call_command("createtoken", "nightly-coordinator", stdout=out)
    secret = out.getvalue().strip()
    assert "\n" not in secret
    token = ApiToken.objects.authenticate(secret)
    assert token is not None and token.name == "nightly-coordinator"
    assert secret not in token.hashed and token.hashed == ApiToken.hash_secret(secret)
    entry = AuditEntry.objects.get(action="apitoken.create", object_id=str(token.pk))
    assert entry.actor_label == "system" and secret not in str(entry.after)


def test_an_admin_edit_of_a_policy_bumps_the_version_and_is_audited(admin_client, admin_user):
    policy = RoutingPolicy.objects.get(failure_type="timeout")
    version = PolicyState.current_version()
    url = reverse("admin:orchestrator_routingpolicy_change", args=[policy.pk])
    response = admin_client.post(url, policy_form(policy, max_attempts=5, max_delay=90))
    assert response.status_code == 302
    policy.refresh_from_db()
    assert (policy.max_attempts, policy.max_delay) == (5, 90)
    assert PolicyState.current_version() == version + 1
    entry = AuditEntry.objects.get(object_type="routingpolicy", object_id=str(policy.pk))
    assert entry.actor == admin_user and entry.action == "routingpolicy.update"
    assert entry.before["max_attempts"] == 3 and entry.after["max_attempts"] == 5
    assert entry.after["version"] == version + 1


def test_the_admin_edit_form_asks_why_and_keeps_it_in_the_audit(admin_client):
    policy = RoutingPolicy.objects.get(failure_type="timeout")
    url = reverse("admin:orchestrator_routingpolicy_change", args=[policy.pk])
    form = admin_client.get(url).content.decode()
    assert 'name="change_note"' in form and "Why this change" in form
    change = policy_form(policy, max_attempts=4, change_note="provider asked for fewer")
    assert admin_client.post(url, change).status_code == 302
    entry = AuditEntry.objects.filter(object_type="routingpolicy").latest("created_at")
    assert entry.note == "provider asked for fewer"
    version = PolicyVersion.objects.newest_first().first()
    assert version.note == "provider asked for fewer"
    admin_client.post(url, policy_form(policy, max_attempts=5))  # no note: the default
    assert AuditEntry.objects.filter(object_type="routingpolicy").latest("created_at").note == (
        "edited in the admin"
    )
    override_url = reverse("admin:orchestrator_provideroverride_add")
    assert 'name="change_note"' in admin_client.get(override_url).content.decode()


def test_the_admin_names_webhook_deliveries_in_english(admin_client):
    html = admin_client.get(reverse("admin:index")).content.decode()
    assert "Webhook deliveries" in html and "deliverys" not in html


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"base_delay": -1}, "base_delay"),
        ({"base_delay": 10, "max_delay": 5}, "max_delay"),
        ({"multiplier": 0.5}, "multiplier"),
        ({"max_attempts": 0}, "max_attempts"),
    ],
)
def test_the_admin_refuses_an_invalid_policy(admin_client, changes, field):
    policy = RoutingPolicy.objects.get(failure_type="server_fault")
    version = PolicyState.current_version()
    url = reverse("admin:orchestrator_routingpolicy_change", args=[policy.pk])
    response = admin_client.post(url, policy_form(policy, **changes))
    assert response.status_code == 200
    assert field in response.context["adminform"].form.errors
    assert PolicyState.current_version() == version
    assert not AuditEntry.objects.exists()


def test_a_hard_fail_policy_cannot_be_given_retries(admin_client):
    policy = RoutingPolicy.objects.get(failure_type="auth_failure")
    url = reverse("admin:orchestrator_routingpolicy_change", args=[policy.pk])
    response = admin_client.post(url, policy_form(policy, max_attempts=3))
    assert "max_attempts" in response.context["adminform"].form.errors


def test_override_creation_and_deletion_are_audited(admin_client):
    url = reverse("admin:orchestrator_provideroverride_add")
    response = admin_client.post(
        url,
        {
            "provider": "news_api",
            "match_on": "provider_code",
            "match_value": "QuotaExceeded",
            "failure_type": "rate_limited",
            "retryable": "true",
            "enabled": "on",
            "note": "",
        },
    )
    assert response.status_code == 302
    override = ProviderOverride.objects.get(match_value="QuotaExceeded")
    delete_url = reverse("admin:orchestrator_provideroverride_delete", args=[override.pk])
    admin_client.post(delete_url, {"post": "yes"})
    assert not ProviderOverride.objects.filter(pk=override.pk).exists()
    actions = list(
        AuditEntry.objects.filter(object_type="provideroverride").values_list("action", flat=True)
    )
    assert sorted(actions) == ["provideroverride.create", "provideroverride.delete"]


def test_a_status_code_override_must_be_a_real_status(admin_client):
    url = reverse("admin:orchestrator_provideroverride_add")
    response = admin_client.post(
        url,
        {
            "provider": "",
            "match_on": "status_code",
            "match_value": "abc",
            "failure_type": "timeout",
            "retryable": "unknown",
            "enabled": "on",
        },
    )
    assert response.status_code == 200
    assert "match_value" in response.context["adminform"].form.errors


def test_a_token_created_in_the_admin_shows_its_secret_once(admin_client):
    url = reverse("admin:orchestrator_apitoken_add")
    response = admin_client.post(url, {"name": "scholar-agent"}, follow=True)
    shown = [str(m) for m in response.context["messages"]]
    secret = re.search(r"(fs_\S+)$", shown[0]).group(1)
    token = ApiToken.objects.get(name="scholar-agent")
    assert ApiToken.objects.authenticate(secret) == token
    change_page = admin_client.get(reverse("admin:orchestrator_apitoken_change", args=[token.pk]))
    assert secret not in change_page.content.decode()


def test_revoking_tokens_from_the_admin_is_audited(admin_client):
    token, secret = ApiToken.issue("old-agent")
    url = reverse("admin:orchestrator_apitoken_changelist")
    admin_client.post(url, {"action": "revoke_tokens", "_selected_action": [token.pk]})
    assert ApiToken.objects.authenticate(secret) is None
    assert AuditEntry.objects.filter(action="apitoken.revoke", object_id=str(token.pk)).exists()


@pytest.mark.parametrize(
    "name",
    [
        "workflow",
        "run",
        "routingpolicy",
        "provideroverride",
        "sourcehealth",
        "reviewitem",
        "apitoken",
        "auditentry",
        "policystate",
    ],
)
def test_every_model_has_a_working_admin_list(admin_client, name):
    response = admin_client.get(reverse(f"admin:orchestrator_{name}_changelist"))
    assert response.status_code == 200


def test_a_callback_url_set_in_the_admin_shows_its_signing_secret_once(admin_client):
    token, _ = ApiToken.issue("crm-agent")
    url = reverse("admin:orchestrator_apitoken_change", args=[token.pk])
    response = admin_client.post(
        url, {"name": "crm-agent", "callback_url": "https://agent.example/hook"}, follow=True
    )
    shown = re.search(r"whsec_[\w-]+", response.content.decode())
    assert shown is not None
    token.refresh_from_db()
    assert token.callback_url == "https://agent.example/hook"
    assert token.signing_secret() == shown[0] and shown[0] not in token.sealed_signing_secret
    again = admin_client.get(url).content.decode()
    assert shown[0] not in again  # never shown again
    admin_client.post(url, {"name": "crm-agent renamed", "callback_url": token.callback_url})
    token.refresh_from_db()
    assert token.signing_secret() == shown[0]  # an unrelated edit keeps the secret


def test_webhook_deliveries_and_their_attempts_are_listed_in_the_admin(admin_client, admin_user):
    from orchestrator.models import ReviewItem, Run, WebhookDelivery

    token, _ = ApiToken.issue("crm-agent")
    token.set_callback("https://agent.example/hook")
    run = Run.objects.create(agent="a", source="s", status="failed", token=token)
    item = ReviewItem.objects.create(run=run, reason="r")
    do_resolve_review(item, admin_user, "abort", channel=Channel.DASHBOARD, note="n")
    hook = WebhookDelivery.objects.get(item=item)
    hook.fail(hook.begin_attempt("host:1", *_window()), 503, "HTTP 503: down", _window()[0])
    listing = admin_client.get(reverse("admin:orchestrator_webhookdelivery_changelist"))
    assert listing.status_code == 200 and "agent.example" in listing.content.decode()
    page = admin_client.get(reverse("admin:orchestrator_webhookdelivery_change", args=[hook.pk]))
    assert page.status_code == 200 and "HTTP 503: down" in page.content.decode()


def _window():
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    return now, now + timedelta(seconds=30)


def test_a_token_is_issued_in_the_project_chosen_in_the_admin(admin_client):
    from orchestrator.models import DEFAULT_PROJECT_ID, Project

    acme = Project.objects.create(slug="acme", name="Acme")
    url = reverse("admin:orchestrator_apitoken_add")
    assert admin_client.post(url, {"name": "acme-agent", "project": acme.pk}).status_code == 302
    assert admin_client.post(url, {"name": "plain-agent"}).status_code == 302
    assert ApiToken.objects.get(name="acme-agent").project_id == acme.pk
    assert ApiToken.objects.get(name="plain-agent").project_id == DEFAULT_PROJECT_ID
    audit = AuditEntry.objects.get(
        action="apitoken.create", object_id=str(ApiToken.objects.get(name="acme-agent").pk)
    )
    assert audit.after["project"] == "acme"


def test_a_project_policy_edited_in_the_admin_is_a_policy_version(admin_client):
    from orchestrator.models import PolicyState, Project, ProjectPolicy

    acme = Project.objects.create(slug="acme", name="Acme")
    before = PolicyState.current_version()
    response = admin_client.post(
        reverse("admin:orchestrator_projectpolicy_add"),
        {
            "project": acme.pk,
            "failure_type": "timeout",
            "max_attempts": 1,
            "base_delay": 0,
            "max_delay": 0,
            "multiplier": 1,
            "jitter": "none",
            "action_when_exhausted": "abort",
            "review_deadline": 3600,
            "review_fallback": "abort",
            "over_budget_action": "abort",
            "change_note": "acme gives up at once",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    assert ProjectPolicy.objects.get(project=acme).max_attempts == 1
    assert PolicyState.current_version() == before + 1
    assert AuditEntry.objects.filter(action="projectpolicy.create").exists()
    for name in ("project", "projectpolicy"):
        assert admin_client.get(reverse(f"admin:orchestrator_{name}_changelist")).status_code == 200
