"""The run store, a module per concern, re-exported here. Changes spanning several models (a
policy edit with its version and audit row) live in `orchestrator.coordination`."""

from orchestrator.models.audit import AuditEntry, actor_label
from orchestrator.models.beat import BeatTick
from orchestrator.models.delivery import OutboxMessage, WebhookAttempt, WebhookDelivery
from orchestrator.models.owners import OwnerGroup, OwnerRule
from orchestrator.models.policies import (
    PolicyState,
    PolicyVersion,
    ProjectPolicy,
    ProviderOverride,
    RoutingPolicy,
    ScrubRule,
    SourceHealth,
)
from orchestrator.models.prices import Price
from orchestrator.models.projects import DEFAULT_PROJECT_ID, Project
from orchestrator.models.pulse import WorkerPulse
from orchestrator.models.review import ReviewItem
from orchestrator.models.run_keys import RunKey, WorkflowCounter, WorkflowRunDelta
from orchestrator.models.run_queries import (
    CREATED_AFTER_MARGIN,
    ENVELOPE_STATUSES,
    NAMED_SETS,
    RunQuerySet,
    RunSets,
)
from orchestrator.models.runs import FailureType, Run
from orchestrator.models.spend import SpendBudget
from orchestrator.models.tokens import ApiToken
from orchestrator.models.trace_spans import TraceSpan
from orchestrator.models.workflows import BUILT_IN_WORKFLOW, Workflow

__all__ = [
    "BUILT_IN_WORKFLOW",
    "CREATED_AFTER_MARGIN",
    "DEFAULT_PROJECT_ID",
    "ENVELOPE_STATUSES",
    "NAMED_SETS",
    "ApiToken",
    "AuditEntry",
    "BeatTick",
    "FailureType",
    "OutboxMessage",
    "OwnerGroup",
    "OwnerRule",
    "PolicyState",
    "PolicyVersion",
    "Price",
    "Project",
    "ProjectPolicy",
    "ProviderOverride",
    "ReviewItem",
    "RoutingPolicy",
    "Run",
    "RunKey",
    "RunQuerySet",
    "RunSets",
    "ScrubRule",
    "SourceHealth",
    "SpendBudget",
    "TraceSpan",
    "WebhookAttempt",
    "WebhookDelivery",
    "WorkerPulse",
    "Workflow",
    "WorkflowCounter",
    "WorkflowRunDelta",
    "actor_label",
]
