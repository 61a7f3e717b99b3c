"""An operator's retry of an agent's run (the runs list's bulk action, the run page's button):
no worker here runs an agent's task, so no queued copy is made; the retry reaches the agent as a
review resolution it picks up, as an operator's resolution would."""

from __future__ import annotations

from django.contrib.auth.models import User

from orchestrator.coordination import actions
from orchestrator.models import ApiToken, AuditEntry, ReviewItem, Run
from orchestrator.vocabulary import Channel


def test_a_retry_of_an_agents_failed_run_is_handed_back_to_the_agent(client, db):
    token, secret = ApiToken.issue("agent")
    run = Run.objects.create(
        agent="a", source="web_search", token=token, status=Run.Status.FAILED,
        failure_type="transient",
    )  # fmt: skip
    operator = User.objects.create_user("olga")

    assert actions.do_retry_runs([run.pk], operator, channel=Channel.DASHBOARD) == 1
    assert not Run.objects.filter(status=Run.Status.QUEUED).exists()  # nothing waits forever
    assert Run.objects.count() == 1
    item = ReviewItem.objects.get(run=run)
    assert (item.state, item.resolution) == ("resolved", "retry")
    assert AuditEntry.objects.filter(action="run.retry", object_id=str(run.pk)).exists()

    headers = {"HTTP_AUTHORIZATION": f"Bearer {secret}"}
    pending = client.get("/api/v1/reviews", {"delivered": "false"}, **headers).json()["items"]
    assert [(i["id"], i["resolution"]["action"]) for i in pending] == [(item.pk, "retry")]

    # Again, or after the agent retried it: nothing more.
    assert actions.do_retry_runs([run.pk], operator, channel=Channel.DASHBOARD) == 0
    assert ReviewItem.objects.filter(run=run).count() == 1
