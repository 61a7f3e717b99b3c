"""The run store, a module per concern: API tokens (`tokens`), workflows (`workflows`), runs
(`runs`, their named sets and queries in `run_queries`, the PostgreSQL triggers' tables in
`run_keys`), the routing policy (`policies`), human review (`review`), what leaves the process
(`delivery`: the outbox and webhook deliveries) and the audit trail (`audit`).

Choice values come from `orchestrator.vocabulary` (failure types are the classifier's taxonomy), so
the database, admin, API and templates share one vocabulary. One instance's behaviour is a model
method (`run.record_outcome`, `item.resolve`); behaviour over many is a named QuerySet method
(`Run.objects.wasted_retries()`). Status transitions are conditional updates; every index names
the query it serves. Changes spanning several models (a policy edit with its version and audit
row) live in `orchestrator.coordination`, HTTP in `orchestrator.api`.
"""

from orchestrator.models.audit import AuditEntry, actor_label
from orchestrator.models.delivery import OutboxMessage, WebhookAttempt, WebhookDelivery
from orchestrator.models.policies import (
    PolicyState,
    PolicyVersion,
    ProviderOverride,
    RoutingPolicy,
    SourceHealth,
)
from orchestrator.models.review import ReviewItem, review_resolved
from orchestrator.models.run_keys import RunKey, WorkflowCounter, WorkflowRunDelta
from orchestrator.models.run_queries import (
    CREATED_AFTER_MARGIN,
    ENVELOPE_STATUSES,
    NAMED_SETS,
    RunQuerySet,
    RunSets,
)
from orchestrator.models.runs import FailureType, Run
from orchestrator.models.tokens import ApiToken
from orchestrator.models.workflows import BUILT_IN_WORKFLOW, Workflow

__all__ = [
    "BUILT_IN_WORKFLOW",
    "CREATED_AFTER_MARGIN",
    "ENVELOPE_STATUSES",
    "NAMED_SETS",
    "ApiToken",
    "AuditEntry",
    "FailureType",
    "OutboxMessage",
    "PolicyState",
    "PolicyVersion",
    "ProviderOverride",
    "ReviewItem",
    "RoutingPolicy",
    "Run",
    "RunKey",
    "RunQuerySet",
    "RunSets",
    "SourceHealth",
    "WebhookAttempt",
    "WebhookDelivery",
    "Workflow",
    "WorkflowCounter",
    "WorkflowRunDelta",
    "actor_label",
    "review_resolved",
]
