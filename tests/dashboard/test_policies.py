"""Policies: the routing table edited in place, validation inline, overrides, the history."""

from __future__ import annotations

import pytest
from django.urls import reverse

from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import AuditEntry, PolicyState, ProviderOverride, RoutingPolicy

from .conftest import make_failure

POLICIES = reverse("dashboard:policies")
HX = {"HTTP_HX_REQUEST": "true"}


def timeout_policy() -> RoutingPolicy:
    return RoutingPolicy.objects.get(failure_type="timeout")


def form_of(policy: RoutingPolicy, **changes) -> dict:
    data = {
        "max_attempts": policy.max_attempts,
        "base_delay": policy.base_delay,
        "max_delay": policy.max_delay,
        "multiplier": policy.multiplier,
        "jitter": policy.jitter,
        "action_when_exhausted": policy.action_when_exhausted,
        "review_deadline": f"{policy.review_deadline / 3600:g}",
        "review_fallback": policy.review_fallback,
        "note": "",
    }
    if policy.hard_fail:
        data["hard_fail"] = "on"
    if policy.refresh_credentials:
        data["refresh_credentials"] = "on"
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def test_the_routing_table_has_one_row_per_failure_type_with_delay_previews(operator_client):
    html = operator_client.get(POLICIES).content.decode()
    for policy in RoutingPolicy.objects.all():
        assert f'id="policy-{policy.pk}"' in html
    assert 'class="delay"' in html  # the preview of retry delays
    assert "Read-only" in html and "/edit/" not in html


def test_an_editor_opens_the_row_form_in_place(editor_client):
    policy = timeout_policy()
    url = reverse("dashboard:policy_edit", args=[policy.pk])
    fragment = editor_client.get(url, **HX).content.decode()
    assert fragment.lstrip().startswith(f'<tr id="policy-{policy.pk}" class="editing">')
    assert "<html" not in fragment
    page = editor_client.get(url).content.decode()  # the href works without htmx
    assert "<html" in page and 'class="editing"' in page


def test_saving_a_row_audits_bumps_the_version_and_returns_the_row(policy_editor, editor_client):
    policy = timeout_policy()
    version = PolicyState.current_version()
    response = editor_client.post(
        reverse("dashboard:policy_edit", args=[policy.pk]),
        form_of(policy, max_attempts=5, note="flaky provider"),
        **HX,
    )
    html = response.content.decode()
    assert response.status_code == 200 and html.lstrip().startswith(f'<tr id="policy-{policy.pk}"')
    assert "policy-changed" in response["HX-Trigger"]
    assert timeout_policy().max_attempts == 5
    assert PolicyState.current_version() == version + 1
    entry = AuditEntry.objects.get(object_type="routingpolicy", object_id=str(policy.pk))
    assert entry.actor == policy_editor and entry.note == "flaky provider"
    assert entry.before["max_attempts"] == 3 and entry.after["max_attempts"] == 5


def test_validation_errors_show_inline(editor_client):
    policy = timeout_policy()
    url = reverse("dashboard:policy_edit", args=[policy.pk])
    response = editor_client.post(url, form_of(policy, base_delay=50, max_delay=5), **HX)
    html = response.content.decode()
    assert response.status_code == 200  # htmx swaps only 2xx: the errors must arrive
    assert "The maximum delay must be ≥ the base delay." in html and 'class="editing"' in html
    assert timeout_policy().max_delay == 60
    response = editor_client.post(url, form_of(policy, max_attempts=99), **HX)
    assert "less than or equal to 20" in response.content.decode()
    hard = RoutingPolicy.objects.get(failure_type="auth_failure")
    url = reverse("dashboard:policy_edit", args=[hard.pk])
    response = editor_client.post(url, form_of(hard, max_attempts=3), **HX)
    assert "A hard-fail type is never retried" in response.content.decode()


def test_refreshing_credentials_first_is_shown_edited_and_audited(policy_editor, editor_client):
    auth = RoutingPolicy.objects.get(failure_type="auth_failure")
    row = reverse("dashboard:policy_row", args=[auth.pk])
    assert "refresh credentials first" in editor_client.get(row, **HX).content.decode()
    form = editor_client.get(reverse("dashboard:policy_edit", args=[auth.pk]), **HX)
    assert 'name="refresh_credentials"' in form.content.decode()
    response = editor_client.post(
        reverse("dashboard:policy_edit", args=[auth.pk]),
        form_of(auth, refresh_credentials=None, note="keys are rotated by hand"),
        **HX,
    )
    assert "refresh credentials first" not in response.content.decode()
    assert not RoutingPolicy.objects.get(pk=auth.pk).refresh_credentials
    entry = AuditEntry.objects.get(object_type="routingpolicy", object_id=str(auth.pk))
    assert (entry.before["refresh_credentials"], entry.after["refresh_credentials"]) == (
        True,
        False,
    )


def test_cancel_returns_the_read_only_row(editor_client):
    policy = timeout_policy()
    response = editor_client.get(reverse("dashboard:policy_row", args=[policy.pk]), **HX)
    assert 'class="editing"' not in response.content.decode()


def test_history_shows_who_when_and_before_after(editor_client):
    policy = timeout_policy()
    editor_client.post(
        reverse("dashboard:policy_edit", args=[policy.pk]), form_of(policy, max_attempts=2)
    )
    fragment = editor_client.get(POLICIES + "?part=history", **HX).content.decode()
    assert fragment.lstrip().startswith('<section class="card" id="history"')
    assert "paul" in fragment and "<del><bdi>3</bdi></del> → <ins><bdi>2</bdi></ins>" in fragment


def test_overrides_can_be_added_edited_and_deleted(editor_client):
    response = editor_client.post(
        reverse("dashboard:override_new"),
        {
            "provider": "esri",
            "match_on": "status_code",
            "match_value": "499",
            "failure_type": "auth_failure",
            "retryable": "false",
            "note": "token",
            "enabled": "on",
        },
        follow=True,
    )
    assert "Override saved" in response.content.decode()
    override = ProviderOverride.objects.get(provider="esri")
    assert override.retryable is False
    editor_client.post(
        reverse("dashboard:override_edit", args=[override.pk]),
        {
            "provider": "esri",
            "match_on": "status_code",
            "match_value": "499",
            "failure_type": "rate_limited",
            "retryable": "",
            "note": "",
            "enabled": "on",
        },
    )
    override.refresh_from_db()
    assert override.failure_type == "rate_limited" and override.retryable is None
    editor_client.post(reverse("dashboard:override_delete", args=[override.pk]))
    assert not ProviderOverride.objects.filter(pk=override.pk).exists()
    actions = list(
        AuditEntry.objects.filter(object_type="provideroverride").values_list("action", flat=True)
    )
    assert sorted(actions) == [
        "provideroverride.create",
        "provideroverride.delete",
        "provideroverride.update",
    ]


def test_override_validation_errors_show_on_the_page(editor_client):
    response = editor_client.post(
        reverse("dashboard:override_new"),
        {
            "provider": "",
            "match_on": "status_code",
            "match_value": "abc",
            "failure_type": "auth_failure",
            "enabled": "on",
        },
    )
    assert response.status_code == 200
    assert "A status code is a number." in response.content.decode()


def dry_run(editor_client, policy: RoutingPolicy, **changes) -> str:
    url = reverse("dashboard:policy_dry_run", args=[policy.pk])
    return editor_client.post(
        url, form_of(policy, **changes) | {"days": "7"}, **HX
    ).content.decode()


def test_a_dry_run_without_failures_says_there_was_nothing_to_replay(editor_client):
    fragment = dry_run(editor_client, timeout_policy(), max_attempts=1)
    assert 'id="dry-run-why"' in fragment
    assert "No failures in the last 7 days: there is nothing to replay." in fragment


def test_a_dry_run_that_changes_nothing_says_why(editor_client):
    policy = timeout_policy()
    for _ in range(2):
        make_failure("rate_limited", decision="retry")
    fragment = dry_run(editor_client, policy, max_attempts=1)
    assert "None of the 2 failures of the last 7 days was timeout" in fragment
    for _ in range(3):
        make_failure("timeout", decision="retry")
    same = dry_run(editor_client, policy, note="only the note")
    version = PolicyState.current_version()
    assert (
        f"This policy makes the same decisions as the current one (v{version}) on the last 3 "
        "timeout failures (7 days), so no figure changes." in same
    )
    assert "review deadline" not in same
    later = dry_run(editor_client, policy, review_deadline=f"{policy.review_deadline + 60}s")
    assert "The review deadline and its fallback act after a decision: not replayed." in later
    changed = dry_run(editor_client, policy, max_attempts=1, action_when_exhausted="escalate")
    assert 'id="dry-run-why"' not in changed and 'class="up"' in changed


def test_a_restore_shows_in_the_change_history(editor_client):
    policy = timeout_policy()
    kept = save_policy_change(_with(policy, max_attempts=5), None, "five")
    save_policy_change(_with(policy, max_attempts=2), None, "two")
    editor_client.post(
        reverse("dashboard:policy_restore", args=[kept]), {"note": "back to five", "confirm": "yes"}
    )
    html = editor_client.get(POLICIES).content.decode()
    history = html[html.index('id="history"') :]
    now = PolicyState.current_version()
    assert f'restore of <a href="#version-{kept}">v{kept}</a>' in history
    assert f"<del>v{now - 1}</del> → <ins>v{now}</ins>" in history
    assert "back to five" in history and "paul" in history
    fragment = editor_client.get(POLICIES + "?part=history", **HX).content.decode()
    assert "restore of <a" in fragment


def _with(policy: RoutingPolicy, **fields) -> RoutingPolicy:
    for name, value in fields.items():
        setattr(policy, name, value)
    return policy


def test_switch_and_escalate_is_an_action_edited_like_the_others(policy_editor, editor_client):
    policy = RoutingPolicy.objects.get(failure_type="auth_failure")
    edit = reverse("dashboard:policy_edit", args=[policy.pk])
    assert 'value="switch_and_escalate"' in editor_client.get(edit, **HX).content.decode()
    response = editor_client.post(
        edit, form_of(policy, action_when_exhausted="switch_and_escalate", note="go on"), **HX
    )
    assert response.status_code == 200 and "switch and escalate" in response.content.decode()
    policy.refresh_from_db()
    assert policy.action_when_exhausted == "switch_and_escalate"
    entry = AuditEntry.objects.get(object_type="routingpolicy", object_id=str(policy.pk))
    assert entry.after["action_when_exhausted"] == "switch_and_escalate"


@pytest.mark.parametrize(
    ("entered", "seconds"),
    [("4", 14400), ("1.5", 5400), ("90m", 5400), ("2d", 172800), ("4 h", 14400)],
)
def test_the_review_deadline_is_entered_in_hours_or_with_a_unit(editor_client, entered, seconds):
    policy = timeout_policy()
    url = reverse("dashboard:policy_edit", args=[policy.pk])
    form = editor_client.get(url, **HX).content.decode()
    assert "Review deadline (hours)" in form
    assert f'name="review_deadline" value="{policy.review_deadline / 3600:g}"' in form
    editor_client.post(url, form_of(policy, review_deadline=entered), **HX)
    assert timeout_policy().review_deadline == seconds


def test_a_review_deadline_that_is_not_a_duration_is_refused_inline(editor_client):
    policy = timeout_policy()
    url = reverse("dashboard:policy_edit", args=[policy.pk])
    html = editor_client.post(url, form_of(policy, review_deadline="soon"), **HX).content.decode()
    assert "hours" in html and 'class="field-error"' in html
    assert timeout_policy().review_deadline == policy.review_deadline
