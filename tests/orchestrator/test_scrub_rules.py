"""Operators' scrub rules are part of the policy: added, edited and deleted in the admin by policy
editors (never by operators), validated, versioned and audited like overrides, restored with a
version, and read by the server's secret filters as soon as their version is announced."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from classifier.scrub import FILTERED
from orchestrator import scrubbing
from orchestrator.coordination.actions import do_restore_policy_version
from orchestrator.coordination.policy_changes import (
    delete_policy_object,
    save_policy_change,
)
from orchestrator.models import AuditEntry, PolicyState, PolicyVersion, ScrubRule
from orchestrator.vocabulary import Channel

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _rules_of_this_test_only():
    yield
    scrubbing.forget()  # the rules compiled here are rolled back with the test


ADD = reverse("admin:orchestrator_scrubrule_add")


def form(**fields: str) -> dict[str, str]:
    return {"kind": "key", "value": "iban", "note": "", "enabled": "on", **fields}


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_rule_added_in_the_admin_bumps_the_version_and_is_audited_with_its_note(
    policy_editor,
):
    user = policy_editor
    user.is_staff = True
    user.save()
    version = PolicyState.current_version()
    response = signed_in(user).post(ADD, form(change_note="bank details in CRM lookups"))
    assert response.status_code == 302, response.content
    rule = ScrubRule.objects.get()
    assert (rule.kind, rule.value, rule.created_by) == ("key", "iban", user)
    assert PolicyState.current_version() == version + 1
    entry = AuditEntry.objects.get(object_type="scrubrule", object_id=str(rule.pk))
    assert (entry.action, entry.actor, entry.note) == (
        "scrubrule.create",
        user,
        "bank details in CRM lookups",
    )
    assert entry.after["value"] == "iban" and entry.after["version"] == version + 1
    snapshot = PolicyVersion.objects.get(version=version + 1)
    assert snapshot.scrub_rules == [rule.snapshot()]


def test_an_operator_may_see_the_rules_but_not_change_them(operator):
    operator.is_staff = True
    operator.save()
    client = signed_in(operator)
    assert client.get(reverse("admin:orchestrator_scrubrule_changelist")).status_code == 200
    assert client.post(ADD, form()).status_code == 403
    assert not ScrubRule.objects.exists()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "pattern", "value": "(unclosed"}, "not a regular expression"),
        ({"kind": "pattern", "value": "a*"}, "matches empty text"),
        # RE2 refuses what it cannot run in linear time or within its memory bound, and says why.
        ({"kind": "pattern", "value": r"(\w+)-\1"}, "invalid escape sequence: \\1"),
        ({"kind": "pattern", "value": r"(?=secret)\w+"}, "invalid perl operator: (?="),
        ({"kind": "pattern", "value": "(?:x{1,1000}){1,1000}"}, "invalid repetition size"),
        ({"kind": "pattern", "value": r"[\p{L}\d]{1000}" * 2}, "pattern too large"),
        ({"kind": "key", "value": "--"}, "needs a letter or a digit"),
    ],
)
def test_the_admin_refuses_a_rule_that_cannot_work(admin_client, fields, message):
    response = admin_client.post(ADD, form(**fields))
    assert response.status_code == 200 and message in response.content.decode()
    assert not ScrubRule.objects.exists()


def test_the_filters_read_the_rules_of_the_version_announced():
    assert scrubbing.current().scrub({"IBAN": "DE89"})[1] == 0
    rule = ScrubRule(kind="key", value="iban")
    save_policy_change(rule, actor=None)
    assert scrubbing.current().scrub({"IBAN": "DE89"}) == ({"IBAN": FILTERED}, 1)
    rule.enabled = False
    save_policy_change(rule, actor=None, note="too broad")
    assert scrubbing.current().scrub({"IBAN": "DE89"})[1] == 0


def test_deleting_a_rule_is_audited_and_restoring_its_version_brings_it_back():
    rule = ScrubRule(kind="pattern", value=r"ACME-(?P<secret>\d{8})", note="order numbers")
    with_rule = save_policy_change(rule, actor=None)
    delete_policy_object(rule, actor=None, note="orders are public now")
    assert not ScrubRule.objects.exists()
    assert AuditEntry.objects.filter(action="scrubrule.delete").exists()
    latest = PolicyVersion.objects.newest_first().first()
    changes = latest.changes_since(PolicyVersion.objects.get(version=with_rule))
    assert [c["what"] for c in changes] == [r"scrub rule pattern:ACME-(?P<secret>\d{8})"]
    do_restore_policy_version(with_rule, None, channel=Channel.DASHBOARD)
    restored = ScrubRule.objects.get()
    assert (restored.value, restored.note) == (rule.value, "order numbers")
    assert scrubbing.current().text("order ACME-77001234")[0] == "order ACME-[Filtered]"


def test_the_total_filtered_is_one_aggregate_over_the_runs_that_held_any(django_assert_num_queries):
    from orchestrator.models import Run

    Run.objects.create(agent="a", source="s", scrubbed_fields=3)
    Run.objects.create(agent="a", source="s", scrubbed_fields=0)
    Run.objects.create(agent="a", source="s", scrubbed_fields=4)
    with django_assert_num_queries(1):
        assert scrubbing.scrubbed_fields_total() == 7
