"""The tools' backend in the web server: each tool calls the service its REST twin calls, for
the token the endpoint admitted (`Caller`), with the same body rules (`bodies.parse_json`: depth,
integers, U+0000), the same secret scrubbing (in the ingest services) and the same error mapping
(`errors.api_error`, as the REST handlers answer). No view is called and no request is made up.

`accept_one` and `finish` are the one seam to the ingest pipeline (`orchestrator.ingest`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import pydantic
from django.db import close_old_connections
from ninja import Schema

from orchestrator import ingest
from orchestrator.api import decisions, policies, reviews, runs
from orchestrator.api.bodies import parse_json
from orchestrator.api.decisions import Absolute
from orchestrator.api.errors import Environ, api_error, envelope
from orchestrator.client import report_body
from orchestrator.client.mcp_tools import ToolFailure
from orchestrator.models import ApiToken, ReviewItem, Run
from orchestrator.schemas import (
    ClassificationOut,
    ClassifyIn,
    DecisionIn,
    DecisionOut,
    PoliciesOut,
    ReviewFilters,
    ReviewIn,
    ReviewListOut,
    ReviewOut,
    RunFinishIn,
    RunOut,
)


def accept_one(token: ApiToken, raw: dict[str, Any], key: str) -> Run:
    """A new report, as `POST /runs` takes it (scrubbed, idempotent by `key`)."""
    [accepted] = ingest.accept(token.pk, [ingest.Report(raw, key=key)], alone=True)
    if accepted.error is not None:
        raise accepted.error
    return accepted.run


def finish(token: ApiToken, run_id: int, outcome: dict[str, Any]) -> Run:
    """A started run's outcome, as `PATCH /runs/{id}` takes it."""
    return runs.finish(token, run_id, RunFinishIn.model_validate(outcome))


@dataclass(frozen=True)
class Caller:
    """Who calls, as the endpoint admitted them."""

    token: ApiToken
    absolute: Absolute  # a path made a whole address for this request's host
    environ: Environ  # the WSGI request's, under the WSGI mount: its work slot (`overload.idle`)


# Set by the endpoint for the request it hands to the MCP app; the SDK runs each tool in a copy
# of that request's context.
CALLER: ContextVar[Caller] = ContextVar("failsight_mcp_caller")


def caller_backend() -> InProcess:
    return InProcess(CALLER.get())


@contextmanager
def database_work() -> Iterator[None]:
    """Database work on one of the SDK's worker threads, which no Django request wraps: its
    connection is given back (or kept, by CONN_MAX_AGE) afterwards, as after a request."""
    close_old_connections()
    try:
        yield
    finally:
        close_old_connections()


class InProcess:
    """The tools' backend (`mcp_tools.Backend`) as the REST API's services, for one caller."""

    def __init__(self, caller: Caller) -> None:
        self.caller = caller
        self.token = caller.token

    def report(
        self, outcome: dict[str, Any], agent: str, source: str, fields: dict[str, Any], key: str
    ) -> dict[str, Any]:
        body = report_body(outcome, agent=agent, source=source, **fields)
        return self._call("report_run", RunOut, lambda: accept_one(self.token, posted(body), key))

    def finish(self, run_id: int, outcome: dict[str, Any]) -> dict[str, Any]:
        return self._call("report_run", RunOut, lambda: finish(self.token, run_id, posted(outcome)))

    def decide(self, body: dict[str, Any]) -> dict[str, Any]:
        def decided() -> Any:
            payload = DecisionIn.model_validate(posted(body))
            return decisions.decision(self.token, payload, self.caller.absolute)

        return self._call("decide", DecisionOut, decided)

    def escalate(self, run_id: int, reason: str) -> dict[str, Any]:
        def escalated() -> Any:
            payload = ReviewIn.model_validate(posted({"run": run_id, "reason": reason}))
            return reviews.escalation(self.token, payload, self.caller.absolute)[0]

        return self._call("escalate", reviews.ReviewCreatedOut, escalated)

    def wait(self, review_id: int, seconds: float) -> dict[str, Any]:
        return self._call(
            "wait_for_resolution",
            ReviewOut,
            lambda: reviews.review(self.token, review_id, seconds, self.caller.environ),
        )

    def resolutions(self, limit: int) -> dict[str, Any]:
        filters = ReviewFilters(state=ReviewItem.State.RESOLVED, delivered=False, limit=limit)
        return self._call(
            "list_resolutions", ReviewListOut, lambda: reviews.reviews_of(self.token, filters)
        )

    def ack(self, review_id: int) -> dict[str, Any]:
        return self._call("ack", ReviewOut, lambda: reviews.acknowledgement(self.token, review_id))

    def classify(self, body: dict[str, Any]) -> dict[str, Any]:
        def classified() -> Any:
            raw = posted(body)
            return decisions.classification(ClassifyIn.model_validate(raw), raw)

        return self._call("classify", ClassificationOut, classified)

    def policies(self) -> dict[str, Any]:
        return self._call(
            "get_policy", PoliciesOut, lambda: policies.policy_snapshot(self.token.project_id)
        )

    @staticmethod
    def _call(
        tool: str, out: type[Schema | pydantic.BaseModel], service: Callable[[], Any]
    ) -> dict[str, Any]:
        """The service's answer through its REST response schema, as JSON data; its error as
        the envelope the REST API answers."""
        operation = f"tools/call {tool}"
        with database_work():
            try:
                return out.model_validate(service()).model_dump(mode="json")
            except Exception as exc:
                raise ToolFailure(envelope(api_error(exc, operation), operation)) from None


def posted(data: dict[str, Any]) -> Any:
    """`data` as the API reads a body: the same limits on depth and integers, U+0000 replaced."""
    return parse_json(json.dumps(data).encode())
