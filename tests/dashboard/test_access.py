"""Every page and action: anonymous → login, outsider → 403, operators and editors as allowed."""

from __future__ import annotations

import pytest
from django.urls import reverse

from insights import groups
from insights.models import FailureGroup
from orchestrator.models import PolicyVersion, ProviderOverride, RoutingPolicy

from .conftest import make_failure, make_review, make_workflow, signed_in


@pytest.fixture
def objects(db):
    workflow = make_workflow()
    run = make_failure("timeout", workflow=workflow)
    item = make_review(run)
    groups.fold()
    return {
        "group": FailureGroup.objects.get().pk,
        "run": run.pk,
        "workflow": workflow.pk,
        "item": item.pk,
        "policy": RoutingPolicy.objects.get(failure_type="timeout").pk,
        "override": ProviderOverride.objects.first().pk,
        "version": PolicyVersion.objects.newest_first().first().version,
    }


# Every route of dashboard/urls.py appears in exactly one of these tables (checked below).
PAGES = [
    ("dashboard:overview", None),
    ("dashboard:runs", None),
    ("dashboard:runs_export", None),
    ("dashboard:runs_total", None),
    ("dashboard:retrying", None),
    ("dashboard:in_flight", None),
    ("dashboard:run_detail", "run"),
    ("dashboard:workflows", None),
    ("dashboard:workflow_detail", "workflow"),
    ("dashboard:workflow_coverage_export", ("workflow", "md")),
    ("dashboard:review_queue", None),
    ("dashboard:review_item", "item"),
    ("dashboard:failure_groups", None),
    ("dashboard:failure_group", "group"),
    ("dashboard:policies", None),
    ("dashboard:switch_efficacy", None),
    ("dashboard:retry_audit", None),
    ("dashboard:slos", None),
    ("dashboard:costs", None),
    ("dashboard:search", None),
]
EDITOR_PAGES = [
    ("dashboard:policy_edit", "policy"),
    ("dashboard:policy_row", "policy"),
    ("dashboard:override_new", None),
    ("dashboard:override_edit", "override"),
    ("dashboard:policy_restore", "version"),
]
# For staff users only, whatever their groups.
STAFF_PAGES = [("dashboard:system", None)]
REVIEW_POSTS = [
    ("dashboard:run_actions", None, {"action": "retry", "run": ["run"]}),
    ("dashboard:review_claim", "item", {}),
    ("dashboard:review_resolve", "item", {"resolution": "abort", "note": "n"}),
    ("dashboard:workflow_abort", "workflow", {"note": "stop"}),
    ("dashboard:failure_group_state", "group", {"state": "muted"}),
]
EDITOR_POSTS = [
    ("dashboard:policy_edit", "policy", {"max_attempts": "2"}),
    ("dashboard:override_new", None, {"match_on": "status_code", "match_value": "499"}),
    ("dashboard:override_delete", "override", {}),
    ("dashboard:policy_dry_run", "policy", {"max_attempts": "2"}),
    ("dashboard:policy_restore", "version", {"note": "back", "confirm": "yes"}),
]


def url(objects, name, key):
    if isinstance(key, tuple):  # an object and a literal argument (a format)
        return reverse(name, args=[objects[key[0]], key[1]])
    return reverse(name, args=[objects[key]] if key else [])


def form(objects, data):
    return {k: [objects[x] for x in v] if isinstance(v, list) else v for k, v in data.items()}


ALL_GETS = PAGES + EDITOR_PAGES + STAFF_PAGES
# Whoever may see runs chooses the project the pages show.
VIEW_POSTS = [("dashboard:project_switch", None, {"project": ""})]
ALL_POSTS = REVIEW_POSTS + EDITOR_POSTS + VIEW_POSTS


def test_the_permission_tables_cover_every_dashboard_route():
    from dashboard.urls import urlpatterns

    routes = {f"dashboard:{p.name}" for p in urlpatterns}
    tabled = {name for name, *_ in ALL_GETS + ALL_POSTS}
    assert routes == tabled


@pytest.mark.parametrize(("name", "key"), ALL_GETS)
def test_anonymous_is_sent_to_the_login_page(client, objects, name, key):
    response = client.get(url(objects, name, key))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize(("name", "key", "data"), ALL_POSTS)
def test_anonymous_posts_are_sent_to_the_login_page(client, objects, name, key, data):
    response = client.post(url(objects, name, key), form(objects, data))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.parametrize(("name", "key"), ALL_GETS)
def test_an_expired_session_sends_htmx_to_the_login_page_not_a_fragment(client, objects, name, key):
    # A tile's refresh (or any htmx request) after the session expired: htmx is told to load
    # the login page, coming back to the page the user was on, instead of swapping the form in.
    response = client.get(
        url(objects, name, key),
        HTTP_HX_REQUEST="true",
        HTTP_HX_CURRENT_URL="http://testserver/runs/?status=failed",
    )
    assert response.status_code == 200
    assert response["HX-Redirect"] == reverse("login") + "?next=/runs/%3Fstatus%3Dfailed"
    assert response.content == b""


@pytest.mark.parametrize(("name", "key", "data"), ALL_POSTS)
def test_an_expired_session_redirects_htmx_posts_to_the_login_page(
    client, objects, name, key, data
):
    response = client.post(url(objects, name, key), form(objects, data), HTTP_HX_REQUEST="true")
    assert response["HX-Redirect"].startswith(reverse("login") + "?next=")
    assert b"<form" not in response.content


@pytest.mark.parametrize(("name", "key"), ALL_GETS)
def test_the_outsider_is_refused_every_page(outsider, objects, name, key):
    assert signed_in(outsider).get(url(objects, name, key)).status_code == 403


@pytest.mark.parametrize(("name", "key", "data"), ALL_POSTS)
def test_the_outsider_is_refused_every_action(outsider, objects, name, key, data):
    response = signed_in(outsider).post(url(objects, name, key), form(objects, data))
    assert response.status_code == 403


@pytest.mark.parametrize(("name", "key"), PAGES)
def test_operators_and_policy_editors_see_every_page(operator, policy_editor, objects, name, key):
    for user in (operator, policy_editor):
        response = signed_in(user).get(url(objects, name, key))
        assert response.status_code == 200, (user, name)


@pytest.mark.parametrize(("name", "key"), EDITOR_PAGES)
def test_only_policy_editors_open_edit_forms(operator, policy_editor, objects, name, key):
    assert signed_in(operator).get(url(objects, name, key)).status_code == 403
    # The read-only policy row is a fragment (the edit form's Cancel): htmx asks for it.
    response = signed_in(policy_editor).get(url(objects, name, key), HTTP_HX_REQUEST="true")
    assert response.status_code == 200


@pytest.mark.parametrize(("name", "key", "data"), EDITOR_POSTS)
def test_operators_cannot_change_policies(operator, objects, name, key, data):
    versions_before = RoutingPolicy.objects.get(pk=objects["policy"]).max_attempts
    response = signed_in(operator).post(url(objects, name, key), form(objects, data))
    assert response.status_code == 403
    assert RoutingPolicy.objects.get(pk=objects["policy"]).max_attempts == versions_before
    assert ProviderOverride.objects.filter(pk=objects["override"]).exists()


@pytest.mark.parametrize(("name", "key"), STAFF_PAGES)
def test_only_staff_see_staff_pages(operator, policy_editor, objects, name, key):
    for user in (operator, policy_editor):
        assert signed_in(user).get(url(objects, name, key)).status_code == 403
    operator.is_staff = True
    operator.save(update_fields=["is_staff"])
    assert signed_in(operator).get(url(objects, name, key)).status_code == 200


def test_get_is_refused_on_actions(operator, objects):
    assert signed_in(operator).get(reverse("dashboard:run_actions")).status_code == 405
    claim = reverse("dashboard:review_claim", args=[objects["item"]])
    assert signed_in(operator).get(claim).status_code == 405


def test_unknown_objects_are_404_not_500(operator, objects):
    client = signed_in(operator)
    assert client.get(reverse("dashboard:run_detail", args=[999999])).status_code == 404
    assert client.get(reverse("dashboard:workflow_detail", args=[999999])).status_code == 404
    assert client.post(reverse("dashboard:review_claim", args=[999999])).status_code == 404


def test_a_signed_in_user_in_no_group_sees_no_review_count(outsider, operator, objects):
    # The nav bar's count is computed only for users who may see the queue.
    page = signed_in(operator).get(reverse("dashboard:overview")).content.decode()
    assert 'id="nav-review-count"' in page


# The project dimension: every object of a project the operator may not see is unknown.
PROJECT_OBJECTS = ("run", "workflow", "item")


@pytest.fixture
def elsewhere(objects):
    """`objects` moved to a project only its own group sees (the operator is not in it)."""
    from django.contrib.auth.models import Group

    from orchestrator.models import Project, ReviewItem, Run, Workflow

    hidden = Project.objects.create(slug="hidden", name="Hidden")
    hidden.groups.add(Group.objects.create(name="hidden team"))
    Run.objects.filter(pk=objects["run"]).update(project=hidden)
    Workflow.objects.filter(pk=objects["workflow"]).update(project=hidden)
    ReviewItem.objects.filter(pk=objects["item"]).update(project=hidden)
    return objects | {"project": hidden.pk}


def _of_project(key) -> bool:
    return (key[0] if isinstance(key, tuple) else key) in PROJECT_OBJECTS


@pytest.mark.parametrize(("name", "key"), [(n, k) for n, k in PAGES if _of_project(k)])
def test_another_projects_objects_are_unknown_on_every_page(operator, elsewhere, name, key):
    assert signed_in(operator).get(url(elsewhere, name, key)).status_code == 404


@pytest.mark.parametrize(
    ("name", "key", "data"), [(n, k, d) for n, k, d in REVIEW_POSTS if _of_project(k)]
)
def test_another_projects_objects_are_unknown_to_every_action(operator, elsewhere, name, key, data):
    from django.contrib.auth.models import Permission

    from orchestrator.models import AuditEntry

    operator.user_permissions.add(Permission.objects.get(codename="review"))
    response = signed_in(operator).post(url(elsewhere, name, key), form(elsewhere, data))
    assert response.status_code == 404
    assert not AuditEntry.objects.exclude(action__startswith="policy").exists()


def test_a_run_action_leaves_another_projects_runs_alone(operator, elsewhere):
    from django.contrib.auth.models import Permission

    from orchestrator.models import Run

    operator.user_permissions.add(Permission.objects.get(codename="review"))
    before = Run.objects.count()
    response = signed_in(operator).post(
        reverse("dashboard:run_actions"), {"action": "retry", "run": [elsewhere["run"]]}
    )
    assert response.status_code in (200, 302, 400)
    assert Run.objects.count() == before


def test_the_outsider_of_a_project_cannot_switch_to_it(operator, elsewhere):
    client = signed_in(operator)
    response = client.post(reverse("dashboard:project_switch"), {"project": elsewhere["project"]})
    assert response.status_code == 404
    page = client.get(reverse("dashboard:runs")).content.decode()
    assert f"/runs/{elsewhere['run']}/" not in page
