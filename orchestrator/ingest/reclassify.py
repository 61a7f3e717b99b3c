"""Reported failures classified again with the server's provider overrides.

An agent embedding the classifier classifies with the overrides it last fetched; the first
failure after an operator's edit is classified before the agent sees the new `X-Policy-Version`.
A report says which version it was classified with (`classified_policy_version`; none: the agent
applied no overrides of ours); when that is older than the current one and the report describes
its exception, the overrides of both versions are asked about that evidence, and where they now
say something else, the current word is stored. Every failure checked records the version used.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from classifier import Failure, Overrides
from classifier.envelope import EXCEPTION_KEYS
from classifier.reported import describes_exception, reclassified
from orchestrator.coordination import policy
from orchestrator.models import PolicyState, PolicyVersion
from orchestrator.schemas import EnvelopeIn


def overrides_at(version: int) -> Overrides | None:
    """Return the enabled overrides of policy `version`, or None if no snapshot of it is kept."""
    rows = PolicyVersion.objects.filter(version=version).values_list("overrides", flat=True)
    snapshot = rows.first()
    return None if snapshot is None else Overrides.from_data(snapshot)


def reclassify(runs: Iterable[EnvelopeIn], sources: Iterable[str | None] | None = None) -> None:
    """Classify again each failure of `runs` that describes its exception and was classified
    under an older policy version (or under none of ours), with the current overrides scoped to
    its source (`sources`, in order, else each report's own); record the version used.

    The version announced lately (memoised for a second) spares reports classified with it any
    query; the others read the current version once per call, and an older version's snapshot."""
    runs = list(runs)
    named = list(sources) if sources is not None else [getattr(r, "source", None) for r in runs]
    announced = current = version = None
    for run, source in zip(runs, named, strict=True):
        if run.status != "error" or run.failure_type is None:
            continue
        said = run.classified_policy_version
        announced = announced or PolicyState.announced_version()
        if said is not None and said >= announced:
            continue
        evidence = _evidence(run)
        if not describes_exception(evidence):
            continue
        if current is None:
            # The classifier of the announced version when cached: no query on most failures.
            current, version = policy.announced_classifier() or policy.versioned_classifier()
        if said is not None and said >= version:
            continue
        earlier = overrides_at(said) if said is not None else None
        restate(run, reclassified(evidence, current, earlier, source), version)


def _evidence(run: EnvelopeIn) -> dict[str, Any]:
    return {name: getattr(run, name) for name in EXCEPTION_KEYS}


def restate(run: EnvelopeIn, failure: Failure | None, version: int) -> None:
    """Record that policy `version`'s overrides classified this failure; with `failure`, theirs
    replaces the reported classification (the type sent kept as reported)."""
    run.classified_policy_version = version
    if failure is None or run.failure_type is None:
        return
    sent = run.reported_failure_type or run.failure_type.value
    run.failure_type = failure.category
    run.retryable = failure.retryable
    run.retry_after = run.retry_after if failure.retryable else None
    run.signal = failure.signal
    if failure.provider_code:
        run.provider_code = failure.provider_code[:200]
    run.reported_failure_type = sent if sent != failure.category.value else None
