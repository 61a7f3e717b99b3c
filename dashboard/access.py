"""Who may see and do what: the view decorators and the one helper every object lookup goes through.
Permissions are model-level, so a user sees all rows of a model or none, within the projects the
user may see (`Project.objects.visible_to`) and has chosen in the top bar's switcher (kept in the
session): every view's decorator works the scope out once, and `visible` applies it."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.decorators import permission_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django_htmx.http import HttpResponseClientRedirect

from orchestrator.models import Project

VIEW = "orchestrator.view_run"
REVIEW = "orchestrator.review"
EDIT_POLICIES = "orchestrator.edit_policies"

# The session's chosen project (its id; absent: every project the user may see).
PROJECT_SESSION_KEY = "project"

# Which permission lets a user see rows of each model the dashboard shows.
_VIEW_PERMS = {
    "run": "orchestrator.view_run",
    "workflow": "orchestrator.view_workflow",
    "reviewitem": "orchestrator.view_reviewitem",
    "routingpolicy": "orchestrator.view_routingpolicy",
    "provideroverride": "orchestrator.view_provideroverride",
    "projectpolicy": "orchestrator.view_projectpolicy",
    "sourcehealth": "orchestrator.view_sourcehealth",
    "auditentry": "orchestrator.view_auditentry",
    # Failure groups are folded from runs: whoever may see the runs may see their groups, if
    # they may see every project (the fold counts every project's runs; `EVERY_PROJECT_MODELS`).
    "failuregroup": "orchestrator.view_run",
}

# Models whose rows count every project's runs (no project of their own): only operators who may
# see every project see them.
EVERY_PROJECT_MODELS = frozenset({"failuregroup"})

V = TypeVar("V", bound=Callable[..., Any])


def requires(perm: str) -> Callable[[V], V]:
    """Sign-in first (anonymous → login page), then the permission (signed-in without it → 403)."""

    def decorate(view: V) -> V:
        guarded = permission_required(perm, raise_exception=True)(view)

        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return to_login(request)
            choose_scope(request)
            return guarded(request, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def staff_required(view: V) -> V:
    """Sign-in first (anonymous → login page), then staff (signed-in without it → 403)."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.is_authenticated:
            return to_login(request)
        if not request.user.is_staff:
            raise PermissionDenied
        choose_scope(request)
        return view(request, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def to_login(request: HttpRequest) -> HttpResponse:
    """Send a signed-out visitor to the login page, and back afterwards. An htmx request gets
    a client redirect instead (a plain one would swap the login form into the page)."""
    if getattr(request, "htmx", False):
        page = request.htmx.current_url_abs_path or request.get_full_path()
        return HttpResponseClientRedirect(redirect_to_login(page).url)
    return redirect_to_login(request.get_full_path())


def may_see(user: Any, model: type[Model]) -> bool:
    """Whether this user may see rows of `model` (permissions are model-level; projects apply
    in `visible`)."""
    name = model._meta.model_name
    perm = _VIEW_PERMS.get(name)
    if perm is None or not user.has_perm(perm):
        return False
    return name not in EVERY_PROJECT_MODELS or sees_every_project(user)


def visible(user: Any, model: type[Model]) -> QuerySet:
    """Every row of `model` this user may see, in the projects the pages show (`project_scope`)."""
    if not may_see(user, model):
        return model.objects.none()
    return in_scope(user, model.objects.all())


def in_scope(user: Any, qs: QuerySet) -> QuerySet:
    """`qs` (of a model with a project) within the projects the pages show this user; any other
    queryset as it is."""
    scope = project_scope(user)
    if scope is None or not _has_project(qs.model):
        return qs
    return qs.filter(project_id__in=scope)


def _has_project(model: type[Model]) -> bool:
    return any(f.name == "project" for f in model._meta.concrete_fields)


class Scope:
    """The projects a request's pages show: `ids` (None: every project, no filter), the projects
    the user may switch to, and the chosen one (None: all of those)."""

    def __init__(
        self, ids: tuple[int, ...] | None, choices: list[Project], chosen: Any, every: bool = True
    ) -> None:
        self.ids = ids
        self.choices = choices
        self.chosen = chosen
        # Whether the user may see every project (what the pages counting every project need).
        self.every = every

    @property
    def label(self) -> str:
        """What the pages show, in words ("all projects" or the project's name)."""
        if self.chosen is not None:
            return str(self.chosen)
        return "all projects" if self.ids is None else "all your projects"


def choose_scope(request: HttpRequest) -> Scope:
    """Work out the request's project scope once and keep it on the request and its user."""
    found = getattr(request, "project_scope", None)
    if found is not None:
        return found
    user = request.user
    every = list(Project.objects.all())
    mine = every if user.is_superuser else list(Project.objects.visible_to(user))
    wanted = request.session.get(PROJECT_SESSION_KEY) if hasattr(request, "session") else None
    chosen = next((p for p in mine if p.pk == wanted), None)
    if chosen is not None:
        ids: tuple[int, ...] | None = (chosen.pk,)
    elif len(mine) == len(every):
        ids = None  # every project: no filter, the rollups' fast path
    else:
        ids = tuple(p.pk for p in mine)
    scope = Scope(ids, mine, chosen, every=len(mine) == len(every))
    request.project_scope = scope  # type: ignore[attr-defined]
    user.project_scope = ids
    user.sees_every_project = scope.every
    return scope


def project_scope(user: Any) -> tuple[int, ...] | None:
    """The ids of the projects the pages show `user` (None: every project). A user no view
    decorator has seen (a helper called directly) gets every project it may see."""
    if hasattr(user, "project_scope"):
        return user.project_scope
    if getattr(user, "is_superuser", False):
        return None
    every = Project.objects.count()
    mine = tuple(Project.objects.visible_to(user).values_list("pk", flat=True))
    return None if len(mine) == every else mine


def sees_every_project(user: Any) -> bool:
    """Whether `user` may see every project (whichever the switcher shows): the pages served from
    structures with no project (the failure groups' fold) are shown to these operators only."""
    if hasattr(user, "sees_every_project"):
        return user.sees_every_project
    if getattr(user, "is_superuser", False):
        return True
    every = Project.objects.count()
    return Project.objects.visible_to(user).count() == every


def every_project_page(view: V) -> V:
    """A page counting every project's runs (under `requires`): refused, with a page saying so,
    to an operator who may not see every project."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not sees_every_project(request.user):
            return render(request, "dashboard/every_project_only.html", status=403)
        return view(request, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


def get_visible(user: Any, model: type[Model], related: tuple[str, ...] = (), **lookup: Any) -> Any:
    """The one object matching `lookup` among those the user may see, or 404."""
    qs = visible(user, model).select_related(*related)
    try:
        return qs.get(**lookup)
    except (model.DoesNotExist, ValueError):
        raise Http404 from None
