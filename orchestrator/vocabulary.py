"""The words the database, the API, routing, the dashboard and the templates share: plain
StrEnums, because routing must stay free of Django."""

from __future__ import annotations

from enum import StrEnum

from classifier import RETRYABLE, FailureCategory

__all__ = [
    "RETRYABLE",
    "Action",
    "Breaker",
    "Channel",
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
        return [(member.value, member.label) for member in cls]

    @property
    def label(self) -> str:
        return self.value.replace("_", " ")

    # As Django's own Choices, so that `{{ Action.RETRY }}` works in a template.
    do_not_call_in_templates = property(lambda self: True)


class Action(Vocabulary):
    """What the coordinator does about a failure: the routing decision, stored on the run."""

    RETRY = "retry"
    # The source itself holds every caller back (its Retry-After, an open breaker): call it
    # again no sooner than the decision's delay, whichever query failed.
    WAIT = "wait"
    SWITCH_SOURCE = "switch_source"
    # A policy's action once retrying is over: switch to the alternative as SWITCH_SOURCE does,
    # and open a review item asking a person to repair the failing source that blocks no work.
    # Its decision is a switch with `escalate` set; with no alternative left it is an escalation.
    SWITCH_AND_ESCALATE = "switch_and_escalate"
    ACCEPT_PARTIAL = "accept_partial"
    ESCALATE = "escalate"
    ABORT = "abort"


class Jitter(Vocabulary):
    """How a retry delay is spread, so that many callers do not retry in step."""

    FULL = "full"
    EQUAL = "equal"
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

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"  # one probe call decides whether it closes again


class Origin(Vocabulary):
    """Who coordinates the work a run belongs to, and so who applies a review's resolution
    (the rule is `Workflow.is_built_in`)."""

    BUILT_IN = "built_in"
    AGENT = "agent"

    @property
    def label(self) -> str:
        return "built-in" if self is Origin.BUILT_IN else "agent-reported"


class Coordinator(Vocabulary):
    """Who steps a workflow: the rule `Workflow.is_built_in` reads this with the capability."""

    BUILT_IN = "built_in"
    EXTERNAL = "external"  # an agent's own coordinator reports the runs and finishes it


class Delivery(Vocabulary):
    """How an agent's coordinator picked up a review item's resolution (the first way wins)."""

    ACK = "ack"
    WEBHOOK = "webhook"


class Channel(Vocabulary):
    """Where an operator's action came from, as its audit row records it: the same action
    function serves every way in."""

    DASHBOARD = "dashboard"
    ADMIN = "admin"
    API = "api"
    SLACK = "slack"
    EMAIL = "email"
    SYSTEM = "system"  # the beat's own actions (a review deadline's fallback)

    @property
    def label(self) -> str:
        return "e-mail" if self is Channel.EMAIL else self.value
