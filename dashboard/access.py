"""Who may see and do what: the view decorators and the one helper every object lookup goes through.
Permissions are model-level, so a user sees all rows of a model or none; keeping the lookup in one
place means a future per-team scope changes one function, not every view."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.decorators import permission_required
from django.contrib.auth.views import redirect_to_login
from django.db.models import Model, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django_htmx.http import HttpResponseClientRedirect

VIEW = "orchestrator.view_run"
REVIEW = "orchestrator.review"
EDIT_POLICIES = "orchestrator.edit_policies"

# Which permission lets a user see rows of each model the dashboard shows.
_VIEW_PERMS = {
    "run": "orchestrator.view_run",
    "workflow": "orchestrator.view_workflow",
    "reviewitem": "orchestrator.view_reviewitem",
    "routingpolicy": "orchestrator.view_routingpolicy",
    "provideroverride": "orchestrator.view_provideroverride",
    "sourcehealth": "orchestrator.view_sourcehealth",
    "auditentry": "orchestrator.view_auditentry",
    # Failure groups are folded from runs: whoever may see the runs may see their groups.
    "failuregroup": "orchestrator.view_run",
}

V = TypeVar("V", bound=Callable[..., Any])


def requires(perm: str) -> Callable[[V], V]:
    """Sign-in first (anonymous → login page), then the permission (signed-in without it → 403)."""

    def decorate(view: V) -> V:
        guarded = permission_required(perm, raise_exception=True)(view)

        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return to_login(request)
            return guarded(request, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate


def to_login(request: HttpRequest) -> HttpResponse:
    """Send a signed-out visitor to the login page, and back afterwards. An htmx request gets
    a client redirect instead (a plain one would swap the login form into the page)."""
    if getattr(request, "htmx", False):
        page = request.htmx.current_url_abs_path or request.get_full_path()
        return HttpResponseClientRedirect(redirect_to_login(page).url)
    return redirect_to_login(request.get_full_path())


def visible(user: Any, model: type[Model]) -> QuerySet:
    """Every row of `model` this user may see."""
    perm = _VIEW_PERMS.get(model._meta.model_name)
    if perm is None or not user.has_perm(perm):
        return model.objects.none()
    return model.objects.all()


def get_visible(user: Any, model: type[Model], related: tuple[str, ...] = (), **lookup: Any) -> Any:
    """The one object matching `lookup` among those the user may see, or 404."""
    qs = visible(user, model).select_related(*related)
    try:
        return qs.get(**lookup)
    except (model.DoesNotExist, ValueError):
        raise Http404 from None
