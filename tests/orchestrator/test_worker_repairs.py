"""Switch and escalate, and the owners' reminder pass, with a REAL Celery worker process (the
fixture of test_worker.py): the workflow finishes on the alternative while the repair item is
open, the item's resolution re-enables the source, and the beat task reminds the item's group."""

from __future__ import annotations

import pytest

from config.celery import app
from orchestrator.coordination.actions import do_resolve_review
from orchestrator.models import (
    AuditEntry,
    OwnerGroup,
    OwnerRule,
    ReviewItem,
    SourceHealth,
    Workflow,
)
from orchestrator.vocabulary import Channel

from .test_switch_and_escalate import switch_and_escalate_auth_failures
from .test_worker import settled, start, wait_for, worker  # noqa: F401  (the fixture)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


def test_the_work_goes_on_while_a_person_repairs_and_the_group_is_reminded(
    worker,  # noqa: F811
    operator,
):
    switch_and_escalate_auth_failures()
    group = OwnerGroup.objects.create(name="data on call", remind_after=1, move_after=3600)
    OwnerRule.objects.create(owner_group=group, source="news_api")
    wf = start(["film"], {"news_api:film": "auth", "news_wire:film": "ok:2"})
    wait_for(settled(wf, *Workflow.FINISHED), 90, "the workflow to finish", worker)
    assert wf.status == Workflow.Status.SUCCEEDED
    item = ReviewItem.objects.get(workflow=wf)
    assert (item.state, item.blocking, item.owner_group) == ("open", False, group)
    assert SourceHealth.objects.get(source="news_api").disabled_at is not None

    app.send_task("orchestrator.tasks.remind_review_owners")
    reminded = ReviewItem.objects.filter(pk=item.pk, reminded_at__isnull=False)
    wait_for(reminded.exists, 60, "the owner group's reminder", worker)
    assert AuditEntry.objects.filter(action="review.remind", object_id=str(item.pk)).exists()

    do_resolve_review(item, operator, "reenable_source", channel=Channel.DASHBOARD, note="fixed")
    applied = ReviewItem.objects.filter(pk=item.pk, continued_at__isnull=False)
    wait_for(applied.exists, 60, "the resolution to be applied", worker)
    assert SourceHealth.objects.get(source="news_api").disabled_at is None
    item.refresh_from_db()
    assert item.outcome == "news_api re-enabled: new work may start on it again."
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.SUCCEEDED
