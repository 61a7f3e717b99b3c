"""An external agent for the main job: its own coordinator loop, talking to Failsight only through
`AgentClient` (no Django, nothing of the server's), as an agent in another framework would.

    FAILSIGHT_AGENT_TOKEN=fs_… python -m demo.agent --url http://127.0.0.1:8000 \\
        --provider http://127.0.0.1:PORT

The token comes from the environment only: a command line is readable by anyone in `ps`.

Half its jobs start with a stale key, a real 401. The agent refreshes its own credentials: the
client holds its refresher, so Failsight answers such a failure "refresh, then retry once" and
the client fetches a new key before the retry. Only the first refresh is refused by the key
service (the account needs an operator): that escalation waits in the review queue, and the agent
acts on `client.resolutions()` without ever blocking on it. Each lookup reports the tokens the
provider's model used for it (its answers' `usage`), which the price table prices.

Nothing the provider or Failsight answers stops it. A lookup that fails in any way (a status, a
dropped connection, a body that is not JSON) is a run it reports and routes like any other. When
Failsight itself fails (unreachable, a 5xx, an answer that is not the API's) it logs, waits
longer each time (up to 30 s) and goes on where it was: each step of a lookup is done once
Failsight has answered it, and repeating one is idempotent.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from classifier.envelope import error_envelope
from orchestrator.client import AgentClient, ClientError

logger = logging.getLogger("demo.agent")

AGENT = "crm-agent"
TOOL = "crm_api"  # the agent's name for its tool; no source of that name is registered
ACCOUNTS = ["ACME", "Globex", "Initech", "Umbrella", "Hooli", "Stark", "Wayne", "Tyrell"]
ASPECTS = ["contacts", "invoices", "tickets", "renewals", "usage", "owners"]
STALE_KEY = "stale-key-rotated-last-week"
MAX_ATTEMPTS = 4
MAX_PAGES = 10
USER_AGENT = f"{AGENT}/1"  # the provider counts its answers per caller
PAUSES = (1.0, 30.0)  # after Failsight failed: the first wait, the longest
REFUSED_REFRESHES = 1  # the key service refuses the agent's first refresh
# What a failing Failsight raises through the client: ClientError once the client gave up, the
# JSON parser's ValueError for a body that is not JSON, the others for JSON of another shape.
FAILSIGHT_ERRORS = (ClientError, httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError)


@dataclass
class Lookup:
    """One attempt at one topic, and how far it got with Failsight."""

    topic: str
    query: dict[str, Any]
    attempt: int = 1
    retry_of: int | None = None
    due: float = 0.0
    key: str = field(default_factory=lambda: uuid.uuid4().hex)  # the run's idempotency key
    run: dict[str, Any] | None = None
    envelope: dict[str, Any] | None = None
    stored: dict[str, Any] | None = None
    partial: list[Any] = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)  # the pages' usage, added up

    @property
    def shown(self) -> dict[str, Any]:
        return {k: v for k, v in self.query.items() if k != "api_key"} | {"key": "given"}

    @property
    def first(self) -> int:
        assert self.run is not None
        return self.run["retry_of"] or self.run["id"]


@dataclass
class Job:
    workflow: int
    topics: list[str]
    todo: list[Lookup] = field(default_factory=list)
    waiting: dict[int, Lookup] = field(default_factory=dict)  # by review item
    to_finish: bool = True


class ExternalAgent:
    def __init__(
        self,
        client: AgentClient,
        provider: str,
        seed: int,
        stop: threading.Event | None = None,
    ) -> None:
        self.client = client
        self.provider = httpx.Client(
            base_url=provider, timeout=5, headers={"User-Agent": USER_AGENT}
        )
        self.rng = random.Random(seed)
        self.jobs: dict[int, Job] = {}
        self.reviews: dict[int, Job] = {}
        self.key = ""
        self.started = 0
        self.next_job = 0.0
        self.planned: tuple[list[str], str, bool, str] | None = None
        self.stop = stop or threading.Event()
        self.counts: Counter[str] = Counter()
        self.refusals_left = REFUSED_REFRESHES
        client.refresher = self.refresh_key  # the client calls it when Failsight says refresh

    # The tool: the provider's internal database

    def fresh_key(self) -> str:
        response = self.provider.post("/v1/keys", json={"source": "internal_db"})
        response.raise_for_status()
        self.key = response.json()["api_key"]
        return self.key

    def refresh_key(self) -> None:
        """The agent's own credential refresher: a new key from the key service (which refuses
        the first refresh: an operator has to look at the account)."""
        self.counts["refreshes"] += 1
        if self.refusals_left > 0:
            self.refusals_left -= 1
            raise PermissionError("the key service refused: crm-agent's account needs an operator")
        self.fresh_key()

    def lookup(self, lookup: Lookup) -> list[Any]:
        """Page through the account's records; what each page gave is kept in `partial`."""
        key = lookup.query.get("api_key") or self.key or self.fresh_key()
        headers = {"Authorization": f"Bearer {key}"}
        q = f"account {lookup.query['account']} {lookup.query.get('aspect', '')}".strip()
        results: list[Any] = []
        page: int | None = 1
        while page and page <= MAX_PAGES:
            response = self.provider.get(
                "/v1/internal_db/search", params={"q": q, "page": page}, headers=headers
            )
            if response.status_code == 401 and key == self.key:
                self.key = ""  # revoked: the next lookup fetches another
            response.raise_for_status()
            body = response.json()
            items = list(body["results"])
            _add_usage(lookup.usage, body.get("usage"))
            lookup.partial.extend(items)
            results.extend(items)
            page = body.get("next_page")
        return results

    def call_tool(self, lookup: Lookup) -> dict[str, Any]:
        """Return the lookup's envelope: whatever the tool raises is a failure to report."""
        try:
            results = self.lookup(lookup)
        except Exception as exc:  # the agent's code never decides what a failure is
            return error_envelope(
                exc,
                attempted=lookup.shown,
                partial_results=lookup.partial,
                classifier=self.client.report_classifier(),
                provider=TOOL,
            )
        return {"status": "ok", "results": results, "attempted": lookup.shown}

    # The coordinator loop

    def start_job(self) -> None:
        if self.planned is None:  # else the same job again, after Failsight failed to start it
            topics = self.rng.sample(ACCOUNTS, 2)
            stale = self.started == 0 or self.rng.random() < 0.5
            self.planned = (topics, self.rng.choice(ASPECTS), stale, uuid.uuid4().hex)
        topics, aspect, stale, key = self.planned
        wf = self.client.start_workflow(
            f"enrich {', '.join(topics)}: {aspect}", topics, goal="CRM data", idempotency_key=key
        )
        self.planned = None
        self.started += 1
        self.counts["jobs"] += 1
        job = Job(wf["id"], topics)
        for topic in topics:
            query = {"account": topic, "aspect": aspect, "api_key": STALE_KEY if stale else ""}
            job.todo.append(Lookup(topic, query))
        self.jobs[job.workflow] = job

    def work(self) -> None:
        """Take every job as far as it can go now."""
        for job in list(self.jobs.values()):
            for lookup in [lk for lk in job.todo if lk.due <= time.monotonic()]:
                if self.stop.is_set():
                    return
                self.accepted(self.advance, job, lookup)
                job.todo.remove(lookup)
            if not job.todo and job.to_finish and not self.accepted(self.finish, job):
                self.jobs.pop(job.workflow, None)  # it cannot be settled from here

    def accepted(self, step: Any, *args: Any) -> bool:
        """Run a step; return False if Failsight refused it for good (asking again cannot
        change that), with a warning."""
        try:
            step(*args)
        except ClientError as exc:
            if exc.failure.retryable:
                raise
            self.counts["refused"] += 1
            logger.warning("crm-agent: Failsight refused %s: %s", step.__name__, exc)
            return False
        return True

    def advance(self, job: Job, lookup: Lookup) -> None:
        """One lookup as a run: start it, call the tool, finish it, and after a failure follow
        Failsight's decision. A step repeated after a failure of Failsight is the same step."""
        if lookup.run is None:
            lookup.run = self.client.start(
                AGENT,
                TOOL,
                "lookup",
                attempted=lookup.shown,
                workflow=job.workflow,
                topic=lookup.topic,
                attempt=lookup.attempt,
                retry_of=lookup.retry_of,
                idempotency_key=lookup.key,
            )
            self.counts["lookups"] += 1
        if lookup.envelope is None:
            lookup.envelope = self.call_tool(lookup)
        if lookup.stored is None:
            lookup.stored = self.client.finish(
                lookup.run["id"], lookup.envelope, usage=lookup.usage or None
            )
            self.counts[f"reported:{lookup.stored.get('failure_type') or 'ok'}"] += 1
        if lookup.envelope["status"] != "ok":
            self.follow(job, lookup, self.client.decide(lookup.run["id"]))

    def follow(self, job: Job, lookup: Lookup, decision: dict[str, Any]) -> None:
        run = lookup.run or {}
        if decision["action"] in ("retry", "wait") and lookup.attempt < MAX_ATTEMPTS:
            due = time.monotonic() + float(decision.get("delay_seconds") or 0)
            # Refreshed (the client called `refresh_key`): the retry goes with the new key.
            query = lookup.query | {"api_key": ""} if decision.get("refresh") else lookup.query
            retry = Lookup(lookup.topic, query, lookup.attempt + 1, lookup.first, due)
            job.todo.append(retry)
        elif decision["action"] == "escalate" and decision.get("review"):
            item = decision["review"]["id"]
            job.waiting[item] = lookup
            self.reviews[item] = job
            logger.info("run %s escalated: review %s waits", run["id"], decision["review"]["url"])

    def finish(self, job: Job) -> None:
        wf = self.client.finish_workflow(job.workflow)
        job.to_finish = False
        if wf["status"] not in ("running", "awaiting_review"):
            self.jobs.pop(job.workflow, None)
            self.counts["jobs_settled"] += 1

    def act_on_resolutions(self) -> None:
        for review in self.client.resolutions():
            job = self.reviews.pop(review.id, None)
            if job is not None:
                self.apply(job, review.id, review.resolution or {})
            review.ack()  # one of ours from an earlier run is acknowledged too

    def apply(self, job: Job, item: int, resolution: dict[str, Any]) -> None:
        failed = job.waiting.pop(item)
        if resolution.get("action") in ("retry", "retry_edited"):
            edited = resolution.get("input") or {}
            account = edited.get("account", failed.query["account"])
            query = failed.query | {"account": account, "api_key": ""}
            job.todo.append(Lookup(failed.topic, query, failed.attempt + 1, failed.first))
        job.to_finish = True

    def tick(self, every: float) -> None:
        if self.stop.is_set():
            return
        if time.monotonic() >= self.next_job:
            self.start_job()
            self.next_job = time.monotonic() + every
        self.work()
        self.act_on_resolutions()

    def run(self, every: float) -> None:
        failures = 0
        while not self.stop.is_set():
            try:
                self.tick(every)
            except FAILSIGHT_ERRORS as exc:
                failures += 1
                self.counts["failsight_errors"] += 1
                pause = min(PAUSES[0] * 2 ** (failures - 1), PAUSES[1])
                logger.warning(
                    "crm-agent: Failsight failed (%s: %s); going on in %.0f s",
                    type(exc).__name__,
                    exc,
                    pause,
                )
                self.stop.wait(pause)
                continue
            failures = 0
            self.stop.wait(1.0)

    def summary(self) -> str:
        reported = ", ".join(
            f"{name.partition(':')[2]} {n}"
            for name, n in sorted(self.counts.items())
            if name.startswith("reported:")
        )
        c = self.counts
        return (
            f"crm-agent: {c['jobs']} jobs ({c['jobs_settled']} settled), {c['lookups']} lookups "
            f"reported ({reported or 'none'}), {c['refreshes']} key refreshes, "
            f"{c['refused']} refused, "
            f"Failsight failed {c['failsight_errors']} times"
        )


def _add_usage(total: dict[str, Any], usage: Any) -> None:
    """Add one answer's `usage` (a model and its token counts) to a lookup's."""
    if not isinstance(usage, dict):
        return
    if isinstance(usage.get("model"), str):
        total["model"] = usage["model"]
    for name in ("input_tokens", "output_tokens"):
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            total[name] = total.get(name, 0) + value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="Failsight's address")
    parser.add_argument("--provider", required=True, help="the demonstration provider's address")
    parser.add_argument(
        "--every",
        type=float,
        default=float(os.environ.get("FAILSIGHT_AGENT_EVERY", "20")),
        help="seconds between two jobs",
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    token = os.environ.get("FAILSIGHT_AGENT_TOKEN", "")
    if not token:
        parser.error("set FAILSIGHT_AGENT_TOKEN to an API token (a command line shows in ps)")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request
    stop = threading.Event()
    # The client's own waits between its retries end at once on a stop.
    client = AgentClient(args.url, token, strict=True, sleep=stop.wait, max_wait=10)
    agent = ExternalAgent(client, args.provider, args.seed, stop=stop)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        agent.run(args.every)
    finally:
        logger.info(agent.summary())
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
