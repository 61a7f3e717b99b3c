"""Who may see and do what: the view decorators and the one helper every object lookup goes through.

Permissions are model-level (the groups seeded by migration 0001), so "what the user may see" is
all rows of a model or none; keeping the lookup in one place means a future per-team scope changes
one function, not every view.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.decorators import login_required, permission_required
from django.db.models import Model, QuerySet
from django.http import Http404

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
}

V = TypeVar("V", bound=Callable[..., Any])


def requires(perm: str) -> Callable[[V], V]:
    """Sign-in first (anonymous → login page), then the permission (signed-in without it → 403)."""

    def decorate(view: V) -> V:
        return wraps(view)(login_required(permission_required(perm, raise_exception=True)(view)))

    return decorate


def visible(user: Any, model: type[Model]) -> QuerySet:
    """Every row of `model` this user may see."""
    perm = _VIEW_PERMS.get(model._meta.model_name)
    if perm is None or not user.has_perm(perm):
        return model._default_manager.none()
    return model._default_manager.all()


def get_visible(user: Any, model: type[Model], related: tuple[str, ...] = (), **lookup: Any) -> Any:
    """The one object matching `lookup` among those the user may see, or 404."""
    qs = visible(user, model).select_related(*related)
    try:
        return qs.get(**lookup)
    except (model.DoesNotExist, ValueError):
        raise Http404 from None
