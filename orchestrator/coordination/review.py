"""Human review, on the coordinator's side: which resolutions can work, and overdue fallbacks.
Resolving is an operator action: `orchestrator.coordination.actions.do_resolve_review`."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from orchestrator.coordination import actions, clock, policy
from orchestrator.coordination.registry import registry
from orchestrator.models import CREATED_AFTER_MARGIN, ReviewItem, Run
from orchestrator.vocabulary import FailureCategory

Resolution = ReviewItem.Resolution


@dataclass(frozen=True)
class ResolutionOption:
    """One resolution as offered: `why` says what it does, or why it cannot."""

    value: str
    available: bool
    why: str

    @property
    def label(self) -> str:
        return Resolution(self.value).label


def resolution_options(item: ReviewItem, tried: set[str] | None = None) -> list[ResolutionOption]:
    """Return every resolution, each marked available or not with the reason; `tried` (from
    `tried_sources`) saves a query per item."""
    run, wf = item.run, item.workflow
    built_in = wf is not None and wf.is_built_in
    applies = "" if built_in else " The agent's own coordinator applies it."
    if not item.blocking:
        return repair_options(item, applies)
    stopped = ""
    if built_in and wf.is_finished:
        stopped = f"The workflow has finished ({wf.get_status_display()}): nothing would run."
    switch_ok, switch_why = _switch(item, tried)
    partial = run.partial_count
    kept = f"keep the {partial} partial results" if partial else "nothing was gathered to keep"
    options = [
        (Resolution.RETRY, not stopped, stopped or f"A new attempt on {run.source}, now."),
        (Resolution.RETRY_EDITED, not stopped, stopped or "A new attempt with the input below."),
        (Resolution.SWITCH_SOURCE, switch_ok and not stopped, stopped or switch_why),
        (Resolution.ACCEPT_PARTIAL, True, f"Stop this task and {kept}."),
        (Resolution.ABORT, True, "Stop this task for good, with your note as the reason."),
    ]
    return [
        ResolutionOption(value, ok, why + (applies if ok else "")) for value, ok, why in options
    ]


def repair_options(item: ReviewItem, applies: str) -> list[ResolutionOption]:
    """A repair item's resolutions: the work went on on another source, so each applies to what
    comes next, never to a run that waited."""
    source = item.run.source
    options = [
        (
            Resolution.REENABLE_SOURCE,
            f"{source} is repaired: clear its hold and its circuit breaker, and let new work "
            "start on it again.",
        ),
        (
            Resolution.RETRY,
            f"Re-enable {source} and ask it again for this task; its answer joins the "
            f"workflow's result.{applies}",
        ),
        (
            Resolution.DISMISS,
            f"Close this item; {source} stays switched away from until someone re-enables it.",
        ),
    ]
    return [ResolutionOption(value, True, why) for value, why in options]


def _switch(item: ReviewItem, tried: set[str] | None) -> tuple[bool, str]:
    """Return whether a switch can work and what it would do or why not, by the rule the
    coordinator switches with."""
    run, wf = item.run, item.workflow
    if tried is None:
        tried = wf.sources_tried(run.topic) if wf is not None else set()
    capability = run.capability or (wf.capability if wf is not None else "")
    suggestions = [a for a in run.alternatives if isinstance(a, str)]
    reg = registry()
    target, suggested = reg.switch_target(
        run.source, set(tried), suggestions, capability=capability or None
    )
    if target is not None:
        how = "which the agent suggested" if suggested else f"the next source of {capability}"
        if not suggested and not capability:
            how = f"the next source that does what {run.source} does"
        return True, f"Ask {target}, {how}."
    capabilities = [capability] if capability else reg.capabilities_of(run.source)
    if not capabilities:
        return False, (
            f"No registered capability lists {run.source}, and the run suggests no registered "
            "source to ask instead."
        )
    known = [name for cap in capabilities for name in reg.sources_for(cap)]
    names = ", ".join(capabilities)
    if not set(known) - {run.source}:
        return False, f"No other source of {names} is registered."
    return False, f"Every source of {names} was tried for this topic: {', '.join(known)}."


def tried_sources(items: list[ReviewItem]) -> dict[tuple[int, str], set[str]]:
    """{(workflow id, topic): sources tried} for the items' runs, in one query."""
    with_workflow = [i for i in items if i.workflow_id]
    keys = {(i.workflow_id, i.run.topic) for i in with_workflow}
    tried: dict[tuple[int, str], set[str]] = {key: set() for key in keys}
    if not keys:
        return tried
    since = min(i.workflow.created_at for i in with_workflow) - CREATED_AFTER_MARGIN
    runs = Run.objects.filter(
        workflow_id__in={w for w, _ in keys}, topic__in={t for _, t in keys}, created_at__gte=since
    ).values_list("workflow_id", "topic", "source")
    for workflow_id, topic, source in runs.distinct().order_by():
        if (workflow_id, topic) in tried:
            tried[(workflow_id, topic)].add(source)
    return tried


def group_options(
    item: ReviewItem, size: int, tried: set[str] | None = None
) -> list[ResolutionOption]:
    """The options of a whole group, judged on its oldest item (`item`), of `size` items."""
    options = resolution_options(item, tried)
    if size <= 1:
        return options
    note = f" Applied to each of the {size} items; any it cannot help is noted on its timeline."
    return [
        ResolutionOption(o.value, o.available, o.why + (note if o.available else ""))
        for o in options
    ]


def fallback_of(item: ReviewItem) -> str:
    """The action the item's deadline applies if no one resolves it: its failure type's review
    fallback under the current policy of its project."""
    snap = policy.current_snapshot(item.project_id)
    return snap.rule(item.failure_type or FailureCategory.UNCLASSIFIED).review_fallback


def apply_overdue_fallbacks(now: datetime | None = None) -> int:
    """Resolve every pending item past its deadline with its failure type's fallback action."""
    now = now or clock.now()
    done = 0
    for item in ReviewItem.objects.overdue(now)[:500]:
        action = fallback_of(item)
        note = f"No decision before the deadline; the {action} fallback applied."
        done += actions.do_apply_review_fallback(item, action, note, now)
    return done
