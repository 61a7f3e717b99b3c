"""The recovery benchmark's status-aware arm: what a user would write instead of Failsight, a real
retry library (tenacity) told which failures are worth retrying.

Each topic's task calls its capability's primary source (no switching) through
`tenacity.Retrying`, as the status-aware baseline the Costs page counts against
(`insights.baseline`): at most 3 attempts; a retry only when the project's own classifier
(`classifier.classify`) calls the failure retryable (so a 401, 404, 400, a 501 or a 503 with
`x-should-retry: false` is not retried); between attempts the failed call's own Retry-After when it
gave one, else the blind arm's exponential backoff (1 s, 2 s, 4 s, at most 8 s). Partial results die
with the exception (tenacity returns a value or raises), and there is no breaker, no retry budget
and no knowledge of a Retry-After another query was given: that is the AWS SDK's standard mode, the
OpenAI and Anthropic SDKs' retries, or tenacity with a predicate. All tasks start at once on the
world's timeline, as the coordinator's runs do."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import tenacity
from recovery_world import START, Timeline, World

import classifier
from insights import baseline


def backoff(state: tenacity.RetryCallState) -> float:
    """The failed call's own Retry-After, else exponential backoff as the blind arm's."""
    failure = classifier.classify(state.outcome.exception())
    return baseline.wait(state.attempt_number, failure.retry_after)


def retryable(exc: BaseException) -> bool:
    return bool(classifier.classify(exc).retryable)


def run_tasks(world: World, timeline: Timeline, workflows: list[tuple[str, list[str]]]) -> dict:
    """Run every topic's task to its end on `timeline`; return {topic: (results, ended at)}."""
    done: dict[str, tuple[int, datetime]] = {}

    def task(cap: str, topic: str) -> None:
        retrying = tenacity.Retrying(
            stop=tenacity.stop_after_attempt(baseline.MAX_ATTEMPTS),
            retry=tenacity.retry_if_exception(retryable),
            wait=backoff,
            sleep=timeline.sleep,
            reraise=True,
        )
        try:
            results = retrying(world.source(f"{cap}_primary"), {"topic": topic}, [])
        except Exception:
            results = []
        done[topic] = (len(results), timeline.now())

    for cap, topics in workflows:
        for topic in topics:
            timeline.spawn(lambda cap=cap, topic=topic: task(cap, topic))
    timeline.drive()
    return done


def settled(done: dict, workflows: list) -> dict[str, datetime]:
    """{topic: when its workflow's report was ready}: its last task's end."""
    out: dict[str, datetime] = {}
    for _cap, topics in workflows:
        end = max((done[t][1] for t in topics), default=START)
        out |= dict.fromkeys(topics, end)
    return out


def holes(world: World, done: dict) -> int:
    """Failed topics the naive report says have no results."""
    return sum(t in world.failed_topics and n == 0 for t, (n, _) in done.items())


def stats(world: World, done: dict, workflows: list) -> dict[str, Any]:
    """The arm's figures that are not the world's (`recovery.measure` adds those)."""
    end = max((at for _, at in done.values()), default=START)
    seconds = round((end - START).total_seconds(), 1)
    return {
        "topics reported as gaps with a reason": 0,
        "silent holes": holes(world, done),
        "review items opened": 0,
        "review items answered by the operator": 0,
        "automatic settle time (s)": seconds,
        "workflows neither settled nor waiting on a human": 0,
        "settle time with the operator (s)": seconds,
        "workflows not settled at the end": 0,
        "credential refreshes": world.refreshes,
    }
