"""The dashboard's pages, one module per part of the product, one function per page; each view
declares its permission and looks objects up through `access.get_visible`."""

from dashboard.views.analytics import retry_audit, slos, switch_efficacy
from dashboard.views.costs import costs_page
from dashboard.views.failure_groups import failure_group, failure_group_state, failure_groups
from dashboard.views.overview import overview
from dashboard.views.policies import (
    override_delete,
    override_edit,
    policies,
    policy_dry_run,
    policy_edit,
    policy_restore,
    policy_row,
)
from dashboard.views.projects import project_switch
from dashboard.views.review_queue import review_claim, review_item, review_queue, review_resolve
from dashboard.views.runs import (
    in_flight,
    retrying,
    run_actions,
    run_detail,
    runs,
    runs_export,
    runs_total,
)
from dashboard.views.search import search
from dashboard.views.system import system
from dashboard.views.workflows import (
    workflow_abort,
    workflow_coverage_export,
    workflow_detail,
    workflows,
)

__all__ = [
    "costs_page",
    "failure_group",
    "failure_group_state",
    "failure_groups",
    "in_flight",
    "override_delete",
    "override_edit",
    "overview",
    "policies",
    "policy_dry_run",
    "policy_edit",
    "policy_restore",
    "policy_row",
    "project_switch",
    "retry_audit",
    "retrying",
    "review_claim",
    "review_item",
    "review_queue",
    "review_resolve",
    "run_actions",
    "run_detail",
    "runs",
    "runs_export",
    "runs_total",
    "search",
    "slos",
    "switch_efficacy",
    "system",
    "workflow_abort",
    "workflow_coverage_export",
    "workflow_detail",
    "workflows",
]
