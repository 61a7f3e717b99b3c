"""The recovery benchmark's world: the seeded workload, the simulated providers that answer it,
what each call consumes, the timeline every run shares, and the critical path of the providers'
waits on each topic's preferred path.

Credentials: a source's credential is either an expiring token, which its credential service
renews on request (a refresh), or a static API key, which only a person can replace. An auth
failure (a 401) on a token source is an expired token: a refresh of that source after the failure
fixes it, and the next call with the new token succeeds. On a static-key source it is a revoked
key: no refresh helps, and the world registers no refresher for it (`refreshable`). Every backup
source and two primaries in three (capabilities whose number is not a multiple of 3) use tokens.

Consumption: every call costs the calling subagent's model tokens, whatever the answer
(AGENT_MODEL: CONTEXT_TOKENS of input plus ITEM_TOKENS for each item it reads back, results or
partial items, and CALL_TOKENS of output, the call it writes), plus the source's price per call
when the provider processed the call (not a refusal: a 401 or a 429). The benchmark prices both
with the product's price table (PRICES, put in its database)."""

from __future__ import annotations

import heapq
import itertools
import random
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from greenlet import greenlet

START = datetime(2025, 1, 1, tzinfo=UTC)
TOPICS_PER_WORKFLOW = 10
CAPABILITIES = 50
# (scenario, weight): a third permanent, two thirds transient, some valid-empty.
MIX = [
    ("auth", 11),
    ("missing", 11),
    ("invalid", 8),
    ("partial_then_auth", 4),
    ("timeout", 17),
    ("server_fault", 11),
    ("not_implemented", 3),
    ("declined", 2),
    ("rate_limited", 15),
    ("partial_then_timeout", 8),
    ("empty", 10),
]
# A 501 and a 503 with x-should-retry: false: server faults whose answer says a retry cannot help.
SAYS_NO_RETRY = {"not_implemented", "declined"}
PERMANENT = {"auth", "missing", "invalid", "partial_then_auth", *SAYS_NO_RETRY}
RETRY_AFTERS = [1, 2, 5, 10, 30]
CALL_SECONDS = 0.2
TIMEOUT_SECONDS = 10.0
AUTH_KINDS = {"auth", "partial_then_auth"}
# What a call consumes (see the module's docstring).
AGENT_MODEL = "recovery-benchmark-agent"
CONTEXT_TOKENS = 2_000
ITEM_TOKENS = 150
CALL_TOKENS = 80
# The price table rows the benchmark puts in its database: the agent's model, dollars per million
# tokens (input, output), and each source's price per call by its place in its capability (a
# search-style primary, a dearer backup).
MODEL_PRICES = {AGENT_MODEL: ("3.00", "15.00")}
PRICE_PER_CALL = {"primary": "0.002", "backup": "0.005"}


def refreshable(source: str) -> bool:
    """Whether the source's credential is an expiring token its credential service renews (the
    module's docstring): every backup, and the primaries of capabilities not a multiple of 3."""
    cap, _, role = source.rpartition("_")
    return role == "backup" or int(cap.removeprefix("cap")) % 3 != 0


@dataclass
class Scenario:
    kind: str
    fails: int = 0  # transient failures before success
    retry_after: int = 0
    partial: int = 0


@dataclass
class Call:
    source: str
    topic: str
    began: datetime
    ended: datetime
    ok: bool
    wasted: bool
    early: bool
    items: int = 0  # results or partial items the call brought back
    refused: bool = False  # a 401 or a 429: the provider did not process it


@dataclass
class World:
    """The simulated providers: ground truth for every call, on per-run clocks. `naive`: a
    subagent's gathered items die with its exception (no partial results kept)."""

    naive: bool
    scenarios: dict[tuple[str, str], Scenario]
    clock: Any = None
    log: list[Call] = field(default_factory=list)
    against_signal: int = 0
    said_no_retry: set[tuple[str, str]] = field(default_factory=set)
    # Every Retry-After a source gave, to any query: (from, until).
    windows: dict[str, list[tuple[datetime, datetime]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    failed_permanently: set[tuple[str, str]] = field(default_factory=set)
    attempts: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    failed_topics: set[str] = field(default_factory=set)
    succeeded: set[tuple[str, str]] = field(default_factory=set)
    partial_of: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    # When each source's credentials were last refreshed, and when each request's expired.
    refreshed: dict[str, datetime] = field(default_factory=dict)
    expired: dict[tuple[str, str], datetime] = field(default_factory=dict)
    refreshes: int = 0

    def refresher(self, name: str):
        """The credential refresher of a token source: the service issues a new token."""

        def refresh() -> None:
            self.refreshes += 1
            self.refreshed[name] = self.clock.now()

        return refresh

    def renewed(self, key: tuple[str, str]) -> bool:
        """Whether the request's expired token was replaced by a refresh since it failed."""
        at = self.expired.get(key)
        # A refresh at the moment of the failure (its retry at once) comes after it.
        return at is not None and key[1] in self.refreshed and self.refreshed[key[1]] >= at

    def needed_partials(self) -> set[str]:
        """Partial items of (topic, source) pairs that never succeeded in this arm."""
        return {
            u for key, urls in self.partial_of.items() if key not in self.succeeded for u in urls
        }

    def superseded_partials(self) -> set[str]:
        """Partial items of pairs that later succeeded here: replaced by the full answer."""
        return {u for key, urls in self.partial_of.items() if key in self.succeeded for u in urls}

    def held(self, source: str, moment: datetime) -> tuple[datetime, datetime] | None:
        """The Retry-After window of `source` running at `moment`, if any."""
        return next((w for w in self.windows[source] if w[0] <= moment < w[1]), None)

    def source(self, name: str):
        def call(query: dict[str, Any], partial: list[dict]) -> list[dict]:
            results = self.call(name, query["topic"], partial)
            self.succeeded.add((query["topic"], name))
            return results

        return call

    def call(self, source: str, topic: str, partial: list[dict]) -> list[dict]:
        began = self.clock.now()
        key = (topic, source)
        window = self.held(source, began)
        early = window is not None
        wasted = early or (key in self.failed_permanently and not self.renewed(key))
        self.attempts[key] += 1
        self.against_signal += key in self.said_no_retry
        sc = self.scenarios[key]
        try:
            if window is not None:
                self.clock.sleep(CALL_SECONDS)
                left = max(1, int((window[1] - began).total_seconds() + 0.999))
                raise exception("rate_limited", str(left), url_of(source, topic))
            results = self.respond(source, topic, key, sc, partial)
        except Exception:
            refused = early or (sc.kind in AUTH_KINDS and key in self.failed_permanently)
            refused = refused or (sc.kind == "rate_limited" and self.attempts[key] == 1)
            items = 0 if early else sc.partial
            ended = self.clock.now()
            self.log.append(Call(source, topic, began, ended, False, wasted, early, items, refused))
            raise
        self.log.append(
            Call(source, topic, began, self.clock.now(), True, wasted, early, len(results))
        )
        return results

    def respond(self, source, topic, key, sc: Scenario, partial) -> list[dict]:
        url = url_of(source, topic)
        items = [{"url": f"{url}&item={i}", "partial": True} for i in range(sc.partial)]
        if not self.naive:  # a naive subagent's gathered items die with its exception
            partial.extend(items)
        if sc.kind in ("timeout", "partial_then_timeout") and self.attempts[key] <= sc.fails:
            self.clock.sleep(TIMEOUT_SECONDS)
            self.failed_topics.add(topic)
            self.partial_of[key].update(i["url"] for i in items)
            raise exception("timeout", "", url)
        self.clock.sleep(CALL_SECONDS)
        if sc.kind in PERMANENT and not self.renewed(key):
            self.partial_of[key].update(i["url"] for i in items)
            if sc.kind in AUTH_KINDS and refreshable(source):  # an expired token
                self.expired.setdefault(key, self.clock.now())
            self.failed_permanently.add(key)
            self.failed_topics.add(topic)
            if sc.kind in SAYS_NO_RETRY:
                self.said_no_retry.add(key)
                raise says_no_retry(sc.kind, url)
            raise exception("auth" if sc.kind == "partial_then_auth" else sc.kind, "", url)
        if sc.kind == "server_fault" and self.attempts[key] <= sc.fails:
            self.failed_topics.add(topic)
            raise exception("server_fault", "503", url)
        if sc.kind == "rate_limited" and self.attempts[key] == 1:
            now = self.clock.now()
            self.windows[source].append((now, now + timedelta(seconds=sc.retry_after)))
            self.failed_topics.add(topic)
            raise exception("rate_limited", str(sc.retry_after), url)
        if sc.kind == "empty":
            return []
        return [{"url": f"{url}&r={i}"} for i in range(3)]


def url_of(source: str, topic: str) -> str:
    return f"https://{source}.example/search?q={topic}"


def exception(kind: str, arg: str, url: str) -> Exception:
    from demo.inprocess import _exception

    return _exception(kind, arg, url)


def says_no_retry(kind: str, url: str) -> Exception:
    """A server fault whose answer says a retry cannot help, as httpx raises it."""
    import httpx

    from demo.inprocess import _status_error

    if kind == "not_implemented":
        return exception("server_fault", "501", url)
    headers = {"x-should-retry": "false"}
    return _status_error(httpx.Request("GET", url), 503, headers, {"error": "not retryable"})


def workload(tasks: int, seed: int) -> tuple[dict, list[tuple[str, list[str]]]]:
    """Return the scenario of every (topic, source) and the workflows (capability, topics)."""
    rng = random.Random(seed)
    kinds = [k for k, w in MIX for _ in range(w)]
    scenarios: dict[tuple[str, str], Scenario] = {}
    workflows = []
    for w in range(0, tasks, TOPICS_PER_WORKFLOW):
        cap = f"cap{(w // TOPICS_PER_WORKFLOW) % CAPABILITIES}"
        topics = [f"t{n}" for n in range(w, min(tasks, w + TOPICS_PER_WORKFLOW))]
        workflows.append((cap, topics))
        for topic in topics:
            kind = rng.choice(kinds)
            sc = Scenario(kind)
            if kind in ("timeout", "server_fault", "partial_then_timeout"):
                sc.fails = rng.choice([1, 1, 2, 3, 5])
            if kind == "rate_limited":
                sc.retry_after = rng.choice(RETRY_AFTERS)
            if kind.startswith("partial"):
                sc.partial = rng.choice([2, 3, 4])
            scenarios[(topic, f"{cap}_primary")] = sc
            backup = "invalid" if kind == "invalid" else rng.choice(["ok"] * 9 + ["empty"])
            scenarios[(topic, f"{cap}_backup")] = Scenario(backup)
    return scenarios, workflows


@dataclass(frozen=True)
class CriticalPath:
    seconds: float
    why: str  # the topic whose path it is, and its waits
    retry_after: float  # the longest single Retry-After


def finish(sc: Scenario, held: float) -> tuple[float, str]:
    """When a topic that stays on a source answers there, with zero processing time, and why:
    every first call goes at once, so the source's Retry-Afters all run from the start and
    `held` is the longest; no later call may start inside it, and a timed-out call takes its
    deadline."""
    if sc.kind == "rate_limited":
        return float(held), f"a Retry-After of {held} s"
    if sc.kind not in ("timeout", "partial_then_timeout"):
        return 0.0, "no wait"
    done = TIMEOUT_SECONDS * (sc.fails - 1) + max(TIMEOUT_SECONDS, held)
    why = f"{sc.fails} calls time out, {TIMEOUT_SECONDS:.0f} s each"
    if held > TIMEOUT_SECONDS:
        why += f", the second no sooner than the source's Retry-After of {held} s"
    return done, why


def critical_path(scenarios: dict, workflows: list) -> CriticalPath:
    """Return the critical path of the waits the providers impose, with zero processing time, on
    the preferred paths. Not a lower bound of settling: an arm that gives a topic up, or moves it
    to another source sooner, settles before it; it is what waiting out every transient failure
    costs at least, the yardstick of the arm that does.

    A topic's path is its capability's sources in order of preference, each kept until it
    answers (a transient failure is waited out, as the taxonomy prescribes) or fails permanently
    (then the next is asked). Calls that answer take no time and the coordinator adds none (no
    backoff): only the providers' waits count, a Retry-After (which holds its source for every
    query) and a timed-out call's deadline (`finish`). No provider here imposes a cool-down of
    its own; a breaker's cool-down is the coordinator's wait. A workflow's critical path is its
    slowest topic's; the bound is the slowest workflow's."""
    stays: dict[str, list[tuple[str, Scenario]]] = defaultdict(list)
    for cap, topics in workflows:
        for topic in topics:
            for source in (f"{cap}_primary", f"{cap}_backup"):
                sc = scenarios[(topic, source)]
                stays[source].append((topic, sc))
                if sc.kind not in PERMANENT:
                    break
    worst, why, longest = 0.0, "no failure imposes a wait", 0
    for source, path in stays.items():
        held = max((sc.retry_after for _, sc in path if sc.kind == "rate_limited"), default=0)
        longest = max(longest, held)
        for topic, sc in path:
            done, said = finish(sc, held)
            if done > worst:
                worst, why = done, f"{topic} on {source}: {said}"
    return CriticalPath(worst, why, float(longest))


class Timeline:
    """One simulated clock for the coordinator and every run. Each run is a greenlet that gives
    way at each of its waits (a call's duration, a backoff, a hold), and the loop resumes
    whatever is due first: calls to a source happen in time order across runs, so a
    Retry-After one query is given is in force for every later call of any query."""

    def __init__(self, clock: Any, disp: Any) -> None:
        self.clock, self.disp = clock, disp
        self.waiting: list[tuple[datetime, int, greenlet]] = []
        self.order = itertools.count()
        self.loop: greenlet | None = None

    def now(self) -> datetime:
        return self.clock.now()

    def spawn(self, task: Any) -> None:
        """Start `task()` as a run of its own on this timeline, now."""
        heapq.heappush(self.waiting, (self.now(), next(self.order), greenlet(task)))

    def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        wake = self.now() + timedelta(seconds=seconds)
        heapq.heappush(self.waiting, (wake, next(self.order), greenlet.getcurrent()))
        self.loop.switch()

    def drive(self) -> None:
        """Run steps, runs and due retries until nothing is left to do."""
        from orchestrator.coordination import dispatch, execution, workflow
        from orchestrator.models import OutboxMessage

        self.loop = greenlet.getcurrent()
        disp = self.disp
        while True:
            if disp.steps:
                workflow.step(*disp.steps.popleft())
            elif disp.runs:
                pk = disp.runs.popleft()
                greenlet(lambda pk=pk: execution.execute_run(pk, run_clock=self)).switch()
            elif unsent := list(OutboxMessage.objects.values_list("pk", flat=True)):
                dispatch.relay(unsent)
            elif not self.advance():
                return

    def advance(self) -> bool:
        """Move to the next due retry or waiting run; False when there is none."""
        from django.db.models import Min

        from orchestrator.coordination import dispatch
        from orchestrator.models import Run

        queued = Run.objects.filter(status=Run.Status.QUEUED, workflow__isnull=False)
        due = queued.aggregate(t=Min("due_at"))["t"]
        if due is not None and (not self.waiting or due < self.waiting[0][0]):
            self.clock.advance_to(due)
            if dispatch.dispatch_due(self.clock.now()):
                return True
        if not self.waiting:
            return False
        moment, _, run = heapq.heappop(self.waiting)
        self.clock.advance_to(moment)
        run.switch()
        return True
