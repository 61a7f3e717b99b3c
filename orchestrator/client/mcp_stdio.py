"""`failsight-mcp`: Failsight's MCP tools over stdio, for desktop agents and any MCP host that
launches its servers as commands. Each tool call is a call of a Failsight's REST API through
`AgentClient`: set FAILSIGHT_URL (the server, e.g. http://127.0.0.1:8000) and FAILSIGHT_TOKEN
(an API token, `manage.py createtoken NAME`) in its environment."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from itertools import islice
from typing import Any

import anyio

from orchestrator.client.api import AgentClient, ClientError, Review
from orchestrator.client.mcp_tools import ToolFailure, build_server, failure_envelope

# A long poll of LONGEST_WAIT seconds fits within the client's patience (its read timeout + the
# poll); a report is answered in milliseconds.
TIMEOUT = 10.0


class RemoteBackend:
    """The tools' backend as a Failsight's REST API."""

    def __init__(self, client: AgentClient) -> None:
        self.client = client

    def report(
        self, envelope: dict[str, Any], agent: str, source: str, fields: dict[str, Any], key: str
    ) -> dict[str, Any]:
        return self._call(
            "report_run",
            lambda: self.client.report(
                envelope, agent=agent, source=source, idempotency_key=key or None, **fields
            ),
        )

    def finish(self, run_id: int, outcome: dict[str, Any]) -> dict[str, Any]:
        return self._call("report_run", lambda: self.client.finish(run_id, outcome))

    def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(
            "decide",
            lambda: self.client.decide(
                body.get("run"),
                body.get("failure"),
                attempt=body.get("attempt", 1),
                source=body.get("source"),
                workflow=body.get("workflow"),
                tried=body.get("tried"),
            ),
        )

    def escalate(self, run_id: int, reason: str) -> dict[str, Any]:
        return self._call("escalate", lambda: self.client.escalate(run_id, reason).data)

    def wait(self, review_id: int, seconds: float) -> dict[str, Any]:
        def waited() -> dict[str, Any]:
            review = self.client.review(review_id)
            review.wait(seconds)
            return review.data

        return self._call("wait_for_resolution", waited)

    def resolutions(self, limit: int) -> dict[str, Any]:
        def listed() -> dict[str, Any]:
            reviews = self.client.resolutions(page_size=limit)
            return {"items": [review.data for review in islice(reviews, limit)]}

        return self._call("list_resolutions", listed)

    def ack(self, review_id: int) -> dict[str, Any]:
        return self._call("ack", lambda: Review(self.client, {"id": review_id}).ack())

    def classify(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._call("classify", lambda: self.client.classify(body))

    def policies(self) -> dict[str, Any]:
        return self._call("get_policy", self.client.policies)

    @staticmethod
    def _call(tool: str, call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        try:
            return call()
        except ClientError as exc:
            raise ToolFailure(_envelope(exc, f"tools/call {tool}")) from None


def _envelope(exc: ClientError, operation: str) -> dict[str, Any]:
    """The server's own error envelope, or, when no Failsight answered one (it is unreachable,
    or something else answered), the envelope of what the client's classifier made of it."""
    if isinstance(exc.body, dict) and "failure_type" in exc.body:
        return exc.body
    failure = exc.failure
    return failure_envelope(
        failure.category,
        f"Failsight did not answer: {failure.detail or failure.category.value}",
        operation,
        retryable=failure.retryable,
        retry_after=failure.retry_after,
        alternatives=["check that FAILSIGHT_URL names a running Failsight"],
    )


async def serve(client: AgentClient) -> None:
    backend = RemoteBackend(client)
    await build_server(lambda: backend).run_stdio_async()


def main() -> None:
    url, token = os.environ.get("FAILSIGHT_URL"), os.environ.get("FAILSIGHT_TOKEN")
    if not url or not token:
        sys.exit("failsight-mcp: set FAILSIGHT_URL (the server) and FAILSIGHT_TOKEN (an API token)")
    with AgentClient(url, token, timeout=TIMEOUT, strict=True, sync_policies=False) as client:
        anyio.run(serve, client)


if __name__ == "__main__":
    main()
