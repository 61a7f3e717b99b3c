"""Dashboard pages, mounted at the site root."""

from django.urls import path

from dashboard import views

app_name = "dashboard"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("runs/", views.runs, name="runs"),
    path("runs/export/", views.runs_export, name="runs_export"),
    path("runs/total/", views.runs_total, name="runs_total"),
    path("runs/retrying/", views.retrying, name="retrying"),
    path("runs/in-flight/", views.in_flight, name="in_flight"),
    path("runs/actions/", views.run_actions, name="run_actions"),
    path("runs/<int:pk>/", views.run_detail, name="run_detail"),
    path("workflows/", views.workflows, name="workflows"),
    path("workflows/<int:pk>/", views.workflow_detail, name="workflow_detail"),
    path("workflows/<int:pk>/abort/", views.workflow_abort, name="workflow_abort"),
    path(
        "workflows/<int:pk>/coverage.<str:fmt>",
        views.workflow_coverage_export,
        name="workflow_coverage_export",
    ),
    path("review/", views.review_queue, name="review_queue"),
    path("review/<int:pk>/", views.review_item, name="review_item"),
    path("review/<int:pk>/claim/", views.review_claim, name="review_claim"),
    path("review/<int:pk>/resolve/", views.review_resolve, name="review_resolve"),
    path("groups/", views.failure_groups, name="failure_groups"),
    path("groups/<int:pk>/", views.failure_group, name="failure_group"),
    path("groups/<int:pk>/state/", views.failure_group_state, name="failure_group_state"),
    path("policies/", views.policies, name="policies"),
    path("policies/<int:pk>/", views.policy_row, name="policy_row"),
    path("policies/<int:pk>/edit/", views.policy_edit, name="policy_edit"),
    path("policies/<int:pk>/dry-run/", views.policy_dry_run, name="policy_dry_run"),
    path("policies/versions/<int:version>/restore/", views.policy_restore, name="policy_restore"),
    path("policies/overrides/new/", views.override_edit, name="override_new"),
    path("policies/overrides/<int:pk>/edit/", views.override_edit, name="override_edit"),
    path("policies/overrides/<int:pk>/delete/", views.override_delete, name="override_delete"),
    path("efficacy/", views.switch_efficacy, name="switch_efficacy"),
    path("retry-audit/", views.retry_audit, name="retry_audit"),
    path("slos/", views.slos, name="slos"),
    path("costs/", views.costs_page, name="costs"),
    path("search/", views.search, name="search"),
    path("projects/switch/", views.project_switch, name="project_switch"),
    path("system/", views.system, name="system"),
]
