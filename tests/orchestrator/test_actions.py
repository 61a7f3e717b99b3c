"""Operators' actions (`orchestrator.coordination.actions`): each one's transition, audit row (with
the channel it came from), notification and continuation happen in that one call, and a
resolution reaches the coordinator exactly once.

Driven in process with the simulated clock (tests/orchestrator/test_coordinator.py's way): the
outbox's messages are relayed on commit to a dispatcher that records them.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from orchestrator.coordination import actions, dispatch, review
from orchestrator.coordination.actions import (
    do_claim_review,
    do_escalate_runs,
    do_resolve_review,
    do_restore_policy_version,
)
from orchestrator.coordination.policy_changes import save_policy_change
from orchestrator.models import (
    ApiToken,
    AuditEntry,
    OutboxMessage,
    PolicyState,
    PolicyVersion,
    ReviewItem,
    RoutingPolicy,
    Run,
    WebhookDelivery,
)
from orchestrator.vocabulary import Channel

from .test_coordinator import sim  # noqa: F401  (the fixture)


def escalated_item(sim) -> ReviewItem:  # noqa: F811
    sim.start(["film"], {"news_api:film": "missing", "news_wire:film": ["auth", "ok"]})
    sim.drive()
    return ReviewItem.objects.get()


def test_a_resolution_is_audited_with_its_channel_and_continued_once(sim, operator):  # noqa: F811
    item = escalated_item(sim)
    with sim.commit():
        assert do_resolve_review(item, operator, "retry", channel=Channel.SLACK, note="go") == 1
        assert do_resolve_review(item, operator, "abort", channel=Channel.EMAIL) == 0
    assert list(sim.disp.steps) == [(item.workflow_id, item.pk)]
    entry = AuditEntry.objects.get(action="review.resolve")
    assert (entry.channel, entry.actor_label, entry.note) == ("slack", "olga", "go")
    assert (entry.before["state"], entry.after["state"]) == ("open", "resolved")
    sim.drive()
    assert Run.objects.filter(retry_of=item.run).count() == 1


def test_the_continuation_is_written_in_the_resolving_transaction(sim, operator):  # noqa: F811
    item = escalated_item(sim)
    do_resolve_review(item, operator, "abort", channel=Channel.DASHBOARD)
    # Not committed yet: the message waits in the outbox, nothing has reached the broker.
    message = OutboxMessage.objects.get(task=dispatch.STEP_TASK)
    assert message.args == [item.workflow_id, item.pk]
    assert not sim.disp.steps


def test_the_models_transition_alone_audits_and_continues_nothing(sim, operator):  # noqa: F811
    item = escalated_item(sim)
    won = item.mark_resolved(operator, "abort", note="only the row")
    assert [(i.pk, before["state"]) for i, before in won] == [(item.pk, "open")]
    assert not AuditEntry.objects.filter(action="review.resolve").exists()
    assert not OutboxMessage.objects.filter(task=dispatch.STEP_TASK).exists()


def test_an_agents_resolution_queues_its_webhook_and_no_step(operator):
    token, _ = ApiToken.issue("crm-agent")
    token.set_callback("https://agent.example/hook")
    run = Run.objects.create(
        agent="a", source="crm", status=Run.Status.FAILED, failure_type="auth_failure", token=token
    )
    item = ReviewItem.objects.create(run=run, reason="key expired", failure_type="auth_failure")
    assert do_resolve_review(item, operator, "abort", channel=Channel.API, note="stop") == 1
    assert do_resolve_review(item, operator, "abort", channel=Channel.API) == 0
    assert WebhookDelivery.objects.filter(item=item).count() == 1
    assert not OutboxMessage.objects.filter(task=dispatch.STEP_TASK).exists()
    assert AuditEntry.objects.get(action="review.resolve").channel == "api"


def test_a_claim_is_audited_once_and_held_by_its_claimer_only(
    sim,  # noqa: F811
    operator,
    policy_editor,
):
    item = escalated_item(sim)
    assert do_claim_review(item, operator, channel=Channel.DASHBOARD) is True
    assert do_claim_review(item, operator, channel=Channel.SLACK) is True  # theirs already
    assert do_claim_review(item, policy_editor, channel=Channel.DASHBOARD) is False
    entry = AuditEntry.objects.get(action="review.claim")
    assert (entry.channel, entry.actor_label) == ("dashboard", "olga")
    assert do_resolve_review(item, policy_editor, "abort", channel=Channel.DASHBOARD) == 0


def test_a_fallback_is_audited_as_the_systems_and_an_operator_after_it_changes_nothing(
    sim,  # noqa: F811
    operator,
):
    item = escalated_item(sim)
    with sim.commit():
        assert review.apply_overdue_fallbacks(item.deadline_at + timedelta(seconds=1)) == 1
        assert do_resolve_review(item, operator, "retry", channel=Channel.DASHBOARD) == 0
    assert list(sim.disp.steps) == [(item.workflow_id, item.pk)]
    entry = AuditEntry.objects.get(action__startswith="review.")
    assert (entry.action, entry.channel, entry.actor_label) == (
        "review.fallback",
        "system",
        "system",
    )


def test_an_escalation_from_a_channel_opens_one_item_and_says_where_it_came_from(
    sim,  # noqa: F811
    operator,
):
    sim.start(["film"], {"news_api:film": "missing", "news_wire:film": "missing"})
    sim.drive()
    failed = Run.objects.filter(status=Run.Status.FAILED).order_by("pk").first()
    assert do_escalate_runs([failed.pk], operator, channel=Channel.EMAIL, reason="look") == 1
    assert do_escalate_runs([failed.pk], operator, channel=Channel.EMAIL) == 0
    entry = AuditEntry.objects.get(action="run.escalate")
    assert (entry.channel, entry.note) == ("email", "look")
    assert ReviewItem.objects.filter(run=failed).count() == 1


def test_a_policy_edit_and_its_restore_are_audited_with_their_channels(policy_editor):
    policy = RoutingPolicy.objects.get(failure_type="timeout")
    policy.max_attempts = 5
    kept = save_policy_change(policy, policy_editor, "five", channel=Channel.ADMIN)
    restored = do_restore_policy_version(kept, policy_editor, channel=Channel.DASHBOARD)
    assert restored.version == kept + 1 and restored.restored_from == kept
    edit = AuditEntry.objects.get(action="routingpolicy.update")
    entry = AuditEntry.objects.get(action="policyversion.restore")
    assert (edit.channel, entry.channel) == ("admin", "dashboard")
    assert entry.note == f"restored version {kept}"


def test_restoring_an_unknown_version_raises_and_bumps_nothing(policy_editor):
    before = PolicyState.current_version()
    with pytest.raises(PolicyVersion.DoesNotExist):
        do_restore_policy_version(99999, policy_editor, channel=Channel.DASHBOARD)
    assert PolicyState.current_version() == before
    assert not AuditEntry.objects.filter(action="policyversion.restore").exists()


def test_every_action_takes_its_channel_by_keyword():
    import inspect

    for name in [n for n in dir(actions) if n.startswith("do_")]:
        parameter = inspect.signature(getattr(actions, name)).parameters.get("channel")
        if name == "do_apply_review_fallback":
            assert parameter is None  # the beat's own: always the system channel
            continue
        assert parameter is not None and parameter.kind is inspect.Parameter.KEYWORD_ONLY, name


def test_an_abort_is_audited_once_with_its_channel_and_note(sim, operator):  # noqa: F811
    wf = sim.start(["film"], {"news_api:film": "missing", "news_wire:film": ["auth", "ok"]})
    assert actions.do_abort_workflow(wf.pk, operator, channel=Channel.SLACK, note="wrong goal")
    assert not actions.do_abort_workflow(wf.pk, operator, channel=Channel.SLACK)
    entry = AuditEntry.objects.get(action="workflow.abort")
    assert (entry.channel, entry.note, entry.after) == ("slack", "wrong goal", {"status": "failed"})
