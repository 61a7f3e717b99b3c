"""Projects in the admin: for every registered model, a staff operator of project Alpha never
reaches project Bravo's rows through any way the admin offers (changelist, search, list filters,
the related-lookup popup and autocomplete, related fields' choices, change, delete and history
views, actions and exports), and every registered model says how it is scoped."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Group, Permission, User
from django.db.models import Model
from django.test import Client, RequestFactory
from django.urls import reverse

from insights.models import AlertDelivery, AlertRule
from orchestrator.admin_scoping import EveryProjectOnly, ScopedAdmin, Scoping, Shared
from orchestrator.models import (
    ApiToken,
    AuditEntry,
    Project,
    ProjectPolicy,
    ReviewItem,
    RoutingPolicy,
    Run,
    WebhookDelivery,
    Workflow,
)
from tests.dashboard.conftest import make_failure, make_review, make_workflow

pytestmark = pytest.mark.django_db

REGISTERED = [m for m in apps.get_models() if admin.site.is_registered(m)]


def model_admin(model: type[Model]) -> admin.ModelAdmin:
    return admin.site.get_model_admin(model)


def scoping(model: type[Model]) -> Scoping:
    return model_admin(model).scoping


def label(model: type[Model]) -> str:
    return model._meta.label


# One row of a project per model whose rows belong to projects; `marker` is in its text.


def run_of(project: Project, marker: str) -> Run:
    return make_failure(
        "timeout",
        project=project,
        agent=f"{marker}-agent",
        source=f"{marker}_source",
        detail=f"{marker} detail",
    )


def review_of(project: Project, marker: str) -> ReviewItem:
    return make_review(run_of(project, marker), project=project, reason=f"{marker} reason")


def project_policy(project: Project, marker: str) -> ProjectPolicy:
    fields = RoutingPolicy.objects.get(failure_type="timeout").snapshot()
    fields.pop("failure_type")
    return ProjectPolicy.objects.create(project=project, failure_type="timeout", **fields)


def alert_rule(project: Project, marker: str) -> AlertRule:
    return AlertRule.objects.create(
        name=f"{marker} alert",
        kind=AlertRule.Kind.FAILURE_RATE,
        failure_type="timeout",
        threshold=0.5,
        url=f"https://{marker}.example/alert",
        project=project,
    )


def alert_delivery(project: Project, marker: str) -> AlertDelivery:
    webhook = WebhookDelivery.objects.create(
        event=WebhookDelivery.Event.ALERT_FIRED, url=f"https://{marker}.example/alert"
    )
    return AlertDelivery.objects.create(rule=alert_rule(project, marker), webhook=webhook)


def audit_entry(project: Project, marker: str) -> AuditEntry:
    run = run_of(project, marker)
    return AuditEntry.record(
        actor=None, action="run.retry", obj=run, before=None, after=None, note=f"{marker} note"
    )


OF_A_PROJECT: dict[type[Model], Callable[[Project, str], Model]] = {
    Project: lambda project, marker: project,
    Run: run_of,
    Workflow: lambda project, marker: make_workflow(name=f"{marker} research", project=project),
    ReviewItem: review_of,
    ApiToken: lambda project, marker: ApiToken.issue(f"{marker}-token", project_id=project.pk)[0],
    ProjectPolicy: project_policy,
    AuditEntry: audit_entry,
    WebhookDelivery: lambda project, marker: WebhookDelivery.objects.create(
        item=review_of(project, marker), url=f"https://{marker}.example/hook"
    ),
    AlertRule: alert_rule,
    AlertDelivery: alert_delivery,
}
BY_PROJECT = [m for m in REGISTERED if not isinstance(scoping(m), EveryProjectOnly | Shared)]
EVERY_PROJECT_ONLY = [m for m in REGISTERED if isinstance(scoping(m), EveryProjectOnly)]
SHARED = [m for m in REGISTERED if isinstance(scoping(m), Shared)]


@pytest.fixture
def alpha(db) -> Project:
    project = Project.objects.create(slug="alpha", name="Alpha")
    project.groups.add(Group.objects.create(name="team one"))
    return project


@pytest.fixture
def bravo(db) -> Project:
    project = Project.objects.create(slug="bravo", name="Bravo Labs")
    project.groups.add(Group.objects.create(name="team two"))
    return project


@pytest.fixture
def alpha_operator(alpha, bravo) -> User:
    """Staff, holding every permission of every admin model, in Alpha's group only."""
    user = User.objects.create_user("ops-one", password="ops-one-pass-123", is_staff=True)
    team = alpha.groups.get()
    apps_ = {m._meta.app_label for m in REGISTERED}
    team.permissions.set(Permission.objects.filter(content_type__app_label__in=apps_))
    user.groups.add(team)
    return user


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def url(model: type[Model], view: str, obj: Model | None = None) -> str:
    name = f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}"
    return reverse(name, args=[quote(obj.pk)] if obj is not None else [])


def stored(obj: Model) -> dict[str, Any] | None:
    return type(obj).objects.filter(pk=obj.pk).values().first()


def request_of(user: User) -> Any:
    request = RequestFactory().get("/admin/")
    request.user = user
    return request


def pair(model: type[Model], alpha: Project, bravo: Project) -> tuple[Model, Model]:
    make = OF_A_PROJECT.get(model)
    assert make is not None, f"{label(model)} is scoped by project: add a row maker for it here"
    return make(alpha, "alpha"), make(bravo, "bravo")


# Every registered model names its scoping.


@pytest.mark.parametrize("model", REGISTERED, ids=label)
def test_every_registered_model_says_how_its_rows_belong_to_projects(model):
    found = model_admin(model)
    assert isinstance(found, ScopedAdmin), f"{label(model)}'s admin is not a ScopedAdmin"
    decided = getattr(type(found), "scoping", None)
    assert isinstance(decided, Scoping), f"{label(model)}'s admin names no scoping"
    assert decided.why.strip(), f"{label(model)}'s scoping gives no reason"


def test_the_admin_registers_the_models_the_operators_work_with():
    for model in (Run, Workflow, ReviewItem, AuditEntry, User, Group):
        assert model in REGISTERED


# Models whose rows belong to projects.


@pytest.mark.parametrize("model", BY_PROJECT, ids=label)
def test_the_changelist_its_search_filters_and_popup_show_only_the_operators_projects(
    model, alpha, bravo, alpha_operator
):
    ours, theirs = pair(model, alpha, bravo)
    client = signed_in(alpha_operator)
    listing = url(model, "changelist")
    for query in ({}, {"_popup": "1", "_to_field": "id"}, {"q": "ravo"}, {"q": "alpha"}):
        response = client.get(listing, query)
        assert response.status_code == 200, query
        page = response.content.decode()
        assert url(model, "change", theirs) not in page, query
        # Names, filter choices, search results ("ravo" is searched: the box echoes it).
        assert "bravo" not in page.lower(), query
    page = client.get(listing).content.decode()
    assert url(model, "change", ours) in page


@pytest.mark.parametrize("model", BY_PROJECT, ids=label)
def test_another_projects_row_is_not_found_by_url(model, alpha, bravo, alpha_operator):
    ours, theirs = pair(model, alpha, bravo)
    before = stored(theirs)
    client = signed_in(alpha_operator)
    assert client.get(url(model, "change", ours)).status_code == 200
    for view in ("change", "delete", "history"):
        response = client.get(url(model, view, theirs))
        assert response.status_code in (302, 403, 404), view  # 403: no such view for anyone
        assert "bravo" not in response.content.decode().lower(), view
        response = client.post(url(model, view, theirs), {"post": "yes"})
        assert response.status_code in (302, 403, 404), view
    assert stored(theirs) == before


@pytest.mark.parametrize("model", BY_PROJECT, ids=label)
def test_an_action_on_a_crafted_post_changes_nothing_of_another_project(
    model, alpha, bravo, alpha_operator
):
    ours, theirs = pair(model, alpha, bravo)
    before = stored(theirs)
    client = signed_in(alpha_operator)
    actions = model_admin(model).get_actions(request_of(alpha_operator))
    for name in actions:
        # The operator's own row selected too: the action runs, on it alone.
        selected = [ours.pk, theirs.pk]
        form = {"action": name, "_selected_action": selected, "index": "0", "post": "yes"}
        response = client.post(url(model, "changelist"), form)
        body = b"".join(response) if response.streaming else response.content
        assert "bravo" not in body.decode(errors="replace").lower(), name  # exports too
        assert stored(theirs) == before, name


@pytest.mark.parametrize("model", BY_PROJECT, ids=label)
def test_related_fields_offer_only_the_operators_projects_rows(model, alpha, bravo, alpha_operator):
    """Every admin form field pointing at `model` (a select, a raw id, an autocomplete) and the
    autocomplete endpoint behind it."""
    ours, theirs = pair(model, alpha, bravo)
    request, client = request_of(alpha_operator), signed_in(alpha_operator)
    for source in REGISTERED:
        source_admin = model_admin(source)
        for field in source._meta.get_fields():
            if not (field.is_relation and field.concrete and field.related_model is model):
                continue
            form_field = source_admin.get_form(request).base_fields.get(field.name)
            if form_field is not None:
                choices = form_field.queryset
                assert choices.filter(pk=ours.pk).exists(), (source, field.name)
                assert not choices.filter(pk=theirs.pk).exists(), (source, field.name)
            if field.name in source_admin.autocomplete_fields:
                query = {
                    "app_label": source._meta.app_label,
                    "model_name": source._meta.model_name,
                    "field_name": field.name,
                    "term": "",
                }
                found = json.loads(client.get(reverse("admin:autocomplete"), query).content)
                ids = {row["id"] for row in found["results"]}
                assert str(ours.pk) in ids and str(theirs.pk) not in ids


@pytest.mark.parametrize("model", BY_PROJECT, ids=label)
def test_a_superuser_sees_every_projects_rows(model, alpha, bravo, admin_client):
    ours, theirs = pair(model, alpha, bravo)
    page = admin_client.get(url(model, "changelist")).content.decode()
    assert url(model, "change", ours) in page and url(model, "change", theirs) in page
    assert admin_client.get(url(model, "change", theirs)).status_code == 200


# Models with no project of their own.


@pytest.mark.parametrize("model", EVERY_PROJECT_ONLY, ids=label)
def test_a_model_of_every_project_is_kept_from_an_operator_of_some(model, alpha_operator, bravo):
    client = signed_in(alpha_operator)
    assert url(model, "changelist") not in client.get(reverse("admin:index")).content.decode()
    for view in ("changelist", "add"):
        assert client.get(url(model, view)).status_code == 403, view
    bravo.groups.clear()  # now the operator may see every project
    assert client.get(url(model, "changelist")).status_code == 200


@pytest.mark.parametrize("model", SHARED, ids=label)
def test_shared_configuration_is_every_operators(model, alpha_operator):
    client = signed_in(alpha_operator)
    assert client.get(url(model, "changelist")).status_code == 200


# Audit entries, through their object.


def test_audit_entries_follow_their_objects_project(alpha, bravo, alpha_operator):
    def policy_entry(project: Project) -> AuditEntry:
        row = project_policy(project, "")
        before, pk = row.snapshot(), row.pk
        row.delete()  # its entries outlive it, naming its project
        row.pk = pk
        return AuditEntry.record(
            actor=None, action="projectpolicy.delete", obj=row, before=before, after={}
        )

    ours, theirs = policy_entry(alpha), policy_entry(bravo)
    routing = RoutingPolicy.objects.get(failure_type="timeout")
    shared = AuditEntry.record(
        actor=None, action="routingpolicy.update", obj=routing, before={}, after={}
    )
    lockout = AuditEntry.record_lockout("someone", "10.0.0.9", 5)
    page = signed_in(alpha_operator).get(url(AuditEntry, "changelist")).content.decode()
    assert url(AuditEntry, "change", ours) in page and url(AuditEntry, "change", shared) in page
    assert url(AuditEntry, "change", theirs) not in page
    assert url(AuditEntry, "change", lockout) not in page


def test_an_operator_kept_from_the_default_project_chooses_a_new_tokens_project(
    alpha, alpha_operator
):
    Project.default().groups.add(Group.objects.create(name="default team"))
    client = signed_in(alpha_operator)
    response = client.post(url(ApiToken, "add"), {"name": "unplaced", "running_timeout": ""})
    assert response.status_code == 200 and not ApiToken.objects.filter(name="unplaced").exists()
    response = client.post(
        url(ApiToken, "add"), {"name": "placed", "project": alpha.pk, "running_timeout": ""}
    )
    assert response.status_code == 302
    assert ApiToken.objects.get(name="placed").project == alpha
