"""The words the database, the API, routing, the dashboard and the templates share.

Failure categories are the classifier's taxonomy (`FailureCategory`), re-exported here with the
set of categories a retry can help (derived from the classifier's own table). Decision actions
live here rather than in `models` or `coordination.routing` because both need them and routing
must stay free of Django: `Action` is a plain `StrEnum` that model fields, forms and templates use
as they use Django's `TextChoices`. Run, workflow and review statuses are Django `TextChoices` on
their models (only Django code reads them). No logic lives here, only names.
"""

from __future__ import annotations

from enum import StrEnum

from classifier import RETRYABLE, FailureCategory

__all__ = [
    "RETRYABLE",
    "Action",
    "Breaker",
    "Coordinator",
    "Delivery",
    "FailureCategory",
    "Jitter",
    "Origin",
    "Vocabulary",
]


class Vocabulary(StrEnum):
    """A StrEnum usable wherever Django expects choices: fields, forms and templates."""

    @classmethod
    def choices(cls) -> list[tuple[str, str]]:
        """Return [(value, label)] for a model or form field."""
        return [(member.value, member.label) for member in cls]

    @property
    def label(self) -> str:
        return self.value.replace("_", " ")

    # Templates call what is callable; a class must be passed through as it is, like Django's
    # own Choices, so that `{{ Action.RETRY }}` works in a template.
    do_not_call_in_templates = property(lambda self: True)


class Action(Vocabulary):
    """What the coordinator does about a failure: the routing decision, stored on the run."""

    # Try the same call again after a delay (backoff, or the provider's Retry-After).
    RETRY = "retry"
    # Give the task to the next source of the capability.
    SWITCH_SOURCE = "switch_source"
    # Stop trying and keep what was gathered (the topic's coverage says why it is thin).
    ACCEPT_PARTIAL = "accept_partial"
    # Ask a human: a review item opens and the workflow waits for its resolution.
    ESCALATE = "escalate"
    # Stop this task for good, with the reason.
    ABORT = "abort"


class Jitter(Vocabulary):
    """How a retry delay is spread, so that many callers do not retry in step."""

    # A random delay between 0 and the backoff: the best spread, and the default.
    FULL = "full"
    # Half the backoff fixed, half random: never retries at once.
    EQUAL = "equal"
    # Exactly the backoff: predictable, for a provider that asked for a fixed wait.
    NONE = "none"

    @property
    def label(self) -> str:
        return _JITTER_LABELS[self.value]


_JITTER_LABELS = {
    "full": "full (random between 0 and the delay)",
    "equal": "equal (half fixed, half random)",
    "none": "none (exactly the delay)",
}


class Breaker(Vocabulary):
    """A source's circuit breaker."""

    # Calls go through.
    CLOSED = "closed"
    # Too many failures in a row: no call until the cool-down has passed.
    OPEN = "open"
    # The cool-down passed: one probe call decides whether it closes again.
    HALF_OPEN = "half_open"


class Origin(Vocabulary):
    """Who coordinates the work a run belongs to, and so who applies a review's resolution.

    The rule is `Workflow.is_built_in` (one definition, README "The review queue").
    """

    # The built-in coordinator steps the run's workflow (started over a registered capability):
    # it applies a resolution itself, once, after the decision commits.
    BUILT_IN = "built_in"
    # An agent's own coordinator reported the run (no workflow, or a workflow the built-in
    # coordinator does not step): the decision is recorded for that coordinator to apply.
    AGENT = "agent"

    @property
    def label(self) -> str:
        return "built-in" if self is Origin.BUILT_IN else "agent-reported"


class Coordinator(Vocabulary):
    """Who steps a workflow: the rule `Workflow.is_built_in` reads this with the capability."""

    # The built-in coordinator fans the workflow out over a registered capability and steps it.
    BUILT_IN = "built_in"
    # An agent's own coordinator (LangGraph, CrewAI, a loop of its own) reports the runs and
    # finishes the workflow (`POST /api/v1/workflows/{id}/finish`); the built-in one never steps it.
    EXTERNAL = "external"


class Delivery(Vocabulary):
    """How an agent's coordinator picked up a review item's resolution (the first way wins)."""

    # `POST /api/v1/reviews/{id}/ack`, after a long poll or the unacknowledged feed.
    ACK = "ack"
    # A signed POST to the token's callback URL answered with a 2xx.
    WEBHOOK = "webhook"
