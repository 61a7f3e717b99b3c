"""An external agent for the main job: its own coordinator loop, talking to Failsight only through
`AgentClient` (no Django, nothing of the server's), as an agent in another framework would.

    python -m demo.agent --url http://127.0.0.1:8000 --token fs_… --provider http://127.0.0.1:PORT

Its first job's key is always stale, a real 401 with no refresher: the escalation waits in the
review queue, and the agent acts on `client.resolutions()` without ever blocking on it.
"""

from __future__ import annotations

import argparse
import logging
import random
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx

from orchestrator.client import AgentClient, ClientError

logger = logging.getLogger("demo.agent")

AGENT = "crm-agent"
TOOL = "crm_api"  # the agent's name for its tool; no source of that name is registered
ACCOUNTS = ["ACME", "Globex", "Initech", "Umbrella", "Hooli", "Stark", "Wayne", "Tyrell"]
STALE_KEY = "stale-key-rotated-last-week"
MAX_ATTEMPTS = 4


@dataclass
class Job:
    workflow: int
    topics: list[str]
    waiting: dict[int, tuple[str, int, dict[str, Any]]] = field(default_factory=dict)


class ExternalAgent:
    def __init__(self, client: AgentClient, provider: str, seed: int) -> None:
        self.client = client
        self.provider = httpx.Client(base_url=provider, timeout=5)
        self.rng = random.Random(seed)
        self.jobs: dict[int, Job] = {}
        self.reviews: dict[int, Job] = {}
        self.key = ""
        self.started = 0
        self.stop = threading.Event()

    def fresh_key(self) -> str:
        response = self.provider.post("/v1/keys", json={"source": "internal_db"})
        response.raise_for_status()
        return response.json()["api_key"]

    def lookup(self, query: dict[str, Any]) -> list[Any]:
        headers = {"Authorization": f"Bearer {query.get('api_key') or self.key}"}
        params = {"q": f"account {query['account']}", "page": 1}
        response = self.provider.get("/v1/internal_db/search", params=params, headers=headers)
        response.raise_for_status()
        return response.json()["results"]

    def start_job(self) -> None:
        topics = self.rng.sample(ACCOUNTS, 2)
        wf = self.client.start_workflow(f"enrich {', '.join(topics)}", topics, goal="CRM data")
        job = Job(wf["id"], topics)
        self.jobs[job.workflow] = job
        stale = self.started == 0 or self.rng.random() < 0.5
        self.started += 1
        for topic in topics:
            query = {"account": topic, "api_key": STALE_KEY if stale else ""}
            self.attempt(job, topic, query, attempt=1, retry_of=None)
        self.finish(job)

    def attempt(
        self, job: Job, topic: str, query: dict[str, Any], attempt: int, retry_of: int | None
    ) -> None:
        """One lookup as a run; after a failure, follow Failsight's decision on it."""
        shown = {k: v for k, v in query.items() if k != "api_key"} | {"key": "given"}
        run = self.client.start(
            AGENT,
            TOOL,
            "lookup",
            attempted=shown,
            workflow=job.workflow,
            topic=topic,
            attempt=attempt,
            retry_of=retry_of,
        )
        try:
            results = self.lookup(query)
        except httpx.HTTPError as exc:
            self.client.finish(run["id"], exc, source=TOOL, attempted=shown)
            self.follow(job, topic, query, run, self.client.decide(run["id"]))
            return
        self.client.finish(run["id"], {"status": "ok", "results": results, "attempted": shown})

    def follow(
        self,
        job: Job,
        topic: str,
        query: dict[str, Any],
        run: dict[str, Any],
        decision: dict[str, Any],
    ) -> None:
        first = run["retry_of"] or run["id"]
        if decision["action"] == "retry" and run["attempt"] < MAX_ATTEMPTS:
            self.stop.wait(min(decision["delay_seconds"], 5.0))
            self.attempt(job, topic, query, run["attempt"] + 1, first)
        elif decision["action"] == "escalate" and decision.get("review"):
            item = decision["review"]["id"]
            job.waiting[item] = (topic, run["attempt"], {"first": first} | query)
            self.reviews[item] = job
            logger.info("run %s escalated: review %s waits", run["id"], decision["review"]["url"])

    def act_on_resolutions(self) -> None:
        for review in self.client.resolutions():
            job = self.reviews.pop(review.id, None)
            if job is not None:
                self.apply(job, review.id, review.resolution or {})
            review.ack()  # one of ours from an earlier run is acknowledged too

    def apply(self, job: Job, item: int, resolution: dict[str, Any]) -> None:
        topic, attempt, waited = job.waiting.pop(item)
        if resolution.get("action") in ("retry", "retry_edited"):
            self.key = self.fresh_key()
            edited = resolution.get("input") or {}
            query = {"account": edited.get("account", waited["account"]), "api_key": ""}
            self.attempt(job, topic, query, attempt + 1, waited["first"])
        self.finish(job)

    def finish(self, job: Job) -> None:
        wf = self.client.finish_workflow(job.workflow)
        if wf["status"] not in ("running", "awaiting_review"):
            self.jobs.pop(job.workflow, None)

    def run(self, every: float) -> None:
        self.key = self.fresh_key()
        next_job = 0.0
        clock = 0.0
        while not self.stop.is_set():
            try:
                if clock >= next_job:
                    self.start_job()
                    next_job = clock + every
                self.act_on_resolutions()
            except (ClientError, httpx.HTTPError) as exc:
                logger.warning("crm-agent: %s; trying again shortly", exc)
            self.stop.wait(1.0)
            clock += 1.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="Failsight's address")
    parser.add_argument("--token", required=True, help="an API token")
    parser.add_argument("--provider", required=True, help="the demonstration provider's address")
    parser.add_argument("--every", type=float, default=20.0, help="seconds between two jobs")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    client = AgentClient(args.url, args.token, strict=True)
    agent = ExternalAgent(client, args.provider, args.seed)
    signal.signal(signal.SIGTERM, lambda *_: agent.stop.set())
    signal.signal(signal.SIGINT, lambda *_: agent.stop.set())
    try:
        agent.run(args.every)
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
