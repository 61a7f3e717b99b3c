"""Which resolutions can work, what applying one did, and the facts a review item carries.

Driven in process with the simulated clock (tests/orchestrator/test_coordinator.py's way): the
same step functions the Celery tasks call.
"""

from __future__ import annotations

import pytest

from orchestrator.coordination.actions import do_resolve_review
from orchestrator.coordination.review import resolution_options
from orchestrator.fingerprint import signature
from orchestrator.models import ReviewItem, Run, Workflow
from orchestrator.vocabulary import Channel, Origin

from .test_coordinator import sim  # noqa: F401  (the fixture)


def options(item: ReviewItem) -> dict[str, tuple[bool, str]]:
    return {o.value: (o.available, o.why) for o in resolution_options(item)}


def test_failures_carry_their_signature_and_items_their_facets(sim, operator):  # noqa: F811
    wf = sim.start(["film"], {"news_api:film": "auth"})
    sim.drive()
    item = ReviewItem.objects.get()
    run = item.run
    assert run.signature == signature(run.source, run.failure_type, run.detail)
    assert len(run.signature) == 32 and item.signature == run.signature
    assert (item.source, item.agent, item.origin) == ("news_api", run.agent, Origin.BUILT_IN)
    assert item.workflow == wf
    succeeded = Run.objects.filter(status=Run.Status.SUCCEEDED)
    assert not succeeded.exclude(signature="").exists()


def test_a_switch_is_offered_with_the_next_source_and_says_what_it_did(sim, operator):  # noqa: F811
    wf = sim.start(["film"], {"news_api:film": "auth", "news_wire:film": "ok:2"})
    sim.drive()
    item = ReviewItem.objects.get()
    available, why = options(item)["switch_source"]
    assert available and why == "Ask news_wire, the next source of news."
    with sim.commit():
        do_resolve_review(
            item, operator, "switch_source", channel=Channel.DASHBOARD, note="try the wire"
        )
    sim.drive()
    item.refresh_from_db()
    switched = Run.objects.get(source="news_wire")
    assert item.outcome == f"Switched from news_api to news_wire: run #{switched.pk}."
    assert switched.switched_from == item.run and switched.status == Run.Status.SUCCEEDED
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.SUCCEEDED


def test_no_switch_is_offered_when_every_source_was_tried(sim, operator):  # noqa: F811
    faults = {"news_api:film": "missing", "news_wire:film": "missing", "news_archive:film": "auth"}
    wf = sim.start(["film"], faults)
    sim.drive()
    item = ReviewItem.objects.get()
    assert item.run.source == "news_archive"
    available, why = options(item)["switch_source"]
    assert not available
    assert (
        why == "Every source of news was tried for this topic: news_api, news_wire, news_archive."
    )
    assert options(item)["retry"][0] and options(item)["abort"][0]
    # The model still records what it is told (the dashboard refuses it); applying it says why
    # nothing happened, on the item the workflow's timeline shows.
    with sim.commit():
        do_resolve_review(item, operator, "switch_source", channel=Channel.DASHBOARD)
    sim.drive()
    item.refresh_from_db()
    assert item.outcome.startswith("No untried source of news was left for 'film'")
    wf.refresh_from_db()
    assert wf.status == Workflow.Status.FAILED


def test_a_retry_says_which_run_it_started(sim, operator):  # noqa: F811
    # Refreshed once, refused again: escalated; the operator's retry then succeeds.
    sim.start(["film"], {"news_api:film": ["auth", "auth", "ok:1"]})
    sim.drive()
    item = ReviewItem.objects.get()
    with sim.commit():
        do_resolve_review(item, operator, "retry", channel=Channel.DASHBOARD, note="key rotated")
    sim.drive()
    item.refresh_from_db()
    retried = Run.objects.filter(source="news_api").order_by("-attempt").first()
    assert retried.attempt == item.run.attempt + 1 and retried.status == Run.Status.SUCCEEDED
    assert item.outcome == f"Retried: run #{retried.pk} (attempt {retried.attempt}) on news_api."


def test_a_finished_workflow_is_offered_no_new_attempt(sim, operator):  # noqa: F811
    from orchestrator.coordination.actions import do_abort_workflow

    wf = sim.start(["film"], {"news_api:film": "auth"})
    sim.drive()
    do_abort_workflow(wf.pk, operator, channel=Channel.DASHBOARD, note="wrong goal")
    item = ReviewItem.objects.select_related("workflow").get()
    opts = options(item)
    assert not opts["retry"][0] and "The workflow has finished (Failed)" in opts["retry"][1]
    assert not opts["switch_source"][0] and opts["accept_partial"][0] and opts["abort"][0]


@pytest.mark.django_db
def test_an_agent_reported_item_is_the_agents_to_apply(operator):
    run = Run.objects.create(
        agent="crew-researcher",
        source="vendor_api",
        status=Run.Status.FAILED,
        failure_type="unclassified",
        detail="odd",
    )
    item = ReviewItem.objects.create(run=run, reason="no signal")
    assert (item.origin, item.source, item.agent) == (Origin.AGENT, "vendor_api", run.agent)
    opts = options(item)
    assert opts["retry"] == (
        True,
        "A new attempt on vendor_api, now. The agent's own coordinator applies it.",
    )
    assert opts["switch_source"] == (
        False,
        "No registered capability lists vendor_api, and the run suggests no registered source "
        "to ask instead.",
    )
    # A source it suggested, if registered, is one the coordinator would switch to.
    Run.objects.filter(pk=run.pk).update(alternatives=["try news_wire instead"])
    item.run.refresh_from_db()
    assert options(item)["switch_source"] == (
        True,
        "Ask news_wire, which the agent suggested. The agent's own coordinator applies it.",
    )


@pytest.mark.django_db
def test_resolving_a_group_leaves_the_items_another_operator_holds(operator, policy_editor):
    runs = [
        Run.objects.create(
            agent="a", source="s", status=Run.Status.ESCALATED, failure_type="timeout"
        )
        for _ in range(4)
    ]
    items = [ReviewItem.objects.create(run=r, reason="r", signature="sig") for r in runs]
    assert items[3].claim(policy_editor)
    assert items[0].claim(operator)
    assert (
        do_resolve_review(
            items[0],
            operator,
            "abort",
            channel=Channel.DASHBOARD,
            note="dead source",
            apply_to_group=True,
        )
        == 3
    )
    states = dict(ReviewItem.objects.values_list("pk", "state"))
    assert [states[i.pk] for i in items] == ["resolved", "resolved", "resolved", "claimed"]


@pytest.mark.parametrize(
    ("one", "other", "same"),
    [
        (
            "ReadTimeout after 10 s (request 'a1b2')",
            "ReadTimeout after 12 s (request 'c3d4')",
            True,
        ),
        (
            "Server error '503 Service Unavailable' for url 'http://h:1/v1/a?q=1'",
            "Server error '503 Service Unavailable' for url 'http://h:2/v1/b?q=2'",
            True,
        ),
        (
            "Server error '503 Service Unavailable' for url 'http://h/a'",
            "Server error '500 Internal Server Error' for url 'http://h/a'",
            False,  # a quoted phrase says what went wrong: kept
        ),
        (
            "key 550e8400-e29b-41d4-a716-446655440000 gone",
            "key 6ba7b810-9dad-11d1-80b4-00c04fd430c8 gone",
            True,
        ),
        ("missing column 'title'", "missing column 'author'", False),
    ],
)
def test_a_signature_ignores_what_varies_and_keeps_what_went_wrong(one, other, same):
    assert (signature("s", "server_fault", one) == signature("s", "server_fault", other)) is same
    assert signature("s", "server_fault", one) != signature("t", "server_fault", one)
    assert signature("s", "server_fault", one) != signature("s", "timeout", one)
