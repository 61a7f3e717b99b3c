"""Projects in the admin. Every registered ModelAdmin is a `ScopedAdmin` that names its model's
`scoping`: how its rows belong to projects. Everything the admin reads rows through (changelist,
search, list-filter choices, change, delete and history views, actions and exports, the related
lookups' popups and autocomplete, the choices of a related field) goes through `get_queryset` or
the permission checks, so a staff operator reaches only the rows of the projects they may see
(`Project.objects.visible_to`). Superusers, and operators who may see every project, see all.

The admin has no project switcher: it shows every project the operator may see."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.exceptions import NotRegistered
from django.db.models import Field, Q, QuerySet
from django.http import HttpRequest

from orchestrator.models import Project


class Scoping:
    """How the rows of one model belong to projects; `why` says why this model is scoped so."""

    # Whether operators who may see only some projects are kept out of the model altogether.
    every_project_only = False
    # Whether a related field pointing at this model offers only the rows the operator may see.
    limits_choices = True

    def __init__(self, why: str) -> None:
        self.why = why

    def rows(self, qs: QuerySet, ids: tuple[int, ...]) -> QuerySet:
        """The rows of `qs` in the projects `ids`."""
        raise NotImplementedError


class InProjects(Scoping):
    """Rows whose project, at the end of any of `paths`, is one the operator may see."""

    def __init__(self, *paths: str, why: str) -> None:
        super().__init__(why)
        self.paths = paths

    def rows(self, qs: QuerySet, ids: tuple[int, ...]) -> QuerySet:
        condition = Q()
        for path in self.paths:
            condition |= Q(**{f"{path}__in": ids})
        return qs.filter(condition)


class Shared(Scoping):
    """Configuration every project runs under and that holds no project's work: every operator
    with the model's permissions sees it, as on the dashboard."""

    limits_choices = False

    def rows(self, qs: QuerySet, ids: tuple[int, ...]) -> QuerySet:
        return qs


class EveryProjectOnly(Scoping):
    """Rows that mix every project's work or decide who sees which project: only operators who
    may see every project see the model at all."""

    every_project_only = True
    limits_choices = False

    def rows(self, qs: QuerySet, ids: tuple[int, ...]) -> QuerySet:
        return qs.none()


class ThroughAuditedObject(Scoping):
    """Audit entries belong to the project of the object they record."""

    def rows(self, qs: QuerySet, ids: tuple[int, ...]) -> QuerySet:
        return qs.in_projects(ids)


def project_ids(request: HttpRequest) -> tuple[int, ...] | None:
    """The ids of the projects the request's user may see (None: every project), worked out
    once per request: the admin asks for each model's rows and permissions many times a page."""
    if not hasattr(request, "admin_project_ids"):
        request.admin_project_ids = Project.objects.ids_limiting(request.user)  # type: ignore[attr-defined]
    return request.admin_project_ids  # type: ignore[attr-defined]


class VisibleRelatedFilter(admin.RelatedOnlyFieldListFilter):
    """A related field's list filter offering the related rows the operator may see (what the
    related model's admin shows), not every row of the related table."""

    def field_choices(self, field: Field, request: HttpRequest, model_admin: Any) -> list:
        try:
            related = model_admin.admin_site.get_model_admin(field.related_model)
        except NotRegistered:
            # No admin to ask: the values the operator's own rows hold.
            return super().field_choices(field, request, model_admin)
        ordering = self.field_admin_ordering(field, request, model_admin)
        visible = related.get_queryset(request).values("pk")
        return field.get_choices(
            include_blank=False, limit_choices_to={"pk__in": visible}, ordering=ordering
        )


class ScopedAdmin(admin.ModelAdmin):
    """A ModelAdmin whose rows, permissions, related choices and list filters follow the
    operator's projects, as its `scoping` says (every subclass names one)."""

    scoping: Scoping

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        qs = super().get_queryset(request)
        ids = project_ids(request)
        return qs if ids is None else self.scoping.rows(qs, ids)

    def kept_out(self, request: HttpRequest) -> bool:
        return self.scoping.every_project_only and project_ids(request) is not None

    def has_module_permission(self, request: HttpRequest) -> bool:
        return not self.kept_out(request) and super().has_module_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not self.kept_out(request) and super().has_view_permission(request, obj)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return not self.kept_out(request) and super().has_add_permission(request, *args)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not self.kept_out(request) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return not self.kept_out(request) and super().has_delete_permission(request, obj)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        self.limit_choices(db_field, request, kwargs)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        self.limit_choices(db_field, request, kwargs)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def limit_choices(self, db_field: Any, request: HttpRequest, kwargs: dict[str, Any]) -> None:
        """Let a related field point only at the rows the related model's admin shows, when its
        rows belong to projects (a raw id typed by hand is validated against them too)."""
        if "queryset" in kwargs:
            return
        try:
            related = self.admin_site.get_model_admin(db_field.related_model)
        except NotRegistered:
            return
        if getattr(related, "scoping", None) and related.scoping.limits_choices:
            kwargs["queryset"] = related.get_queryset(request)

    def get_list_filter(self, request: HttpRequest) -> Any:
        return [self.visible_filter(spec) for spec in super().get_list_filter(request)]

    def visible_filter(self, spec: Any) -> Any:
        if isinstance(spec, str) and "__" not in spec:
            field = self.model._meta.get_field(spec)
            if field.is_relation:
                return (spec, VisibleRelatedFilter)
        return spec


def rescope(site: admin.AdminSite, model: type, scoping: Scoping) -> None:
    """Register `model` again (another app registered it) with its admin made a ScopedAdmin;
    nothing when that app registered none (django-axes without AXES_ENABLE_ADMIN)."""
    if not site.is_registered(model):
        return
    registered = type(site.get_model_admin(model))
    site.unregister(model)
    scoped = type(registered.__name__, (ScopedAdmin, registered), {"scoping": scoping})
    site.register(model, scoped)
