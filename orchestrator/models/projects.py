"""Projects: tokens, runs, workflows, review items, alert rules and routing-policy overrides
belong to one. The default project (created by the migration, pk DEFAULT_PROJECT_ID) holds
everything that names no other, so a deployment with one project behaves as before projects.

Operators' access: a project naming no groups is open to every operator (whoever holds the
model permissions, as before projects); a project naming groups is seen only by members of those
groups, and by superusers."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from django.db import models
from django.db.models import Q
from django.utils import timezone

# The default project's primary key, fixed by the migration that creates it: a column default
# PostgreSQL stores once in the catalog, so adding the column rewrites no run partition.
DEFAULT_PROJECT_ID = 1
DEFAULT_SLUG = "default"


class ProjectQuerySet(models.QuerySet):
    def visible_to(self, user: Any) -> ProjectQuerySet:
        """The projects `user` may see: all for a superuser, else the open ones and those naming
        one of the user's groups."""
        if getattr(user, "is_superuser", False):
            return self.all()
        if not getattr(user, "is_authenticated", False):
            return self.none()
        mine = Project.groups.through.objects.filter(group__user=user).values("project_id")
        named = Project.groups.through.objects.values("project_id")
        return self.filter(Q(pk__in=mine) | ~Q(pk__in=named))

    def ids_limiting(self, user: Any) -> tuple[int, ...] | None:
        """The ids of the projects `user` may see, or None when that is every project (no
        filter needed: superusers, and every operator while no project names groups)."""
        if getattr(user, "is_superuser", False):
            return None
        mine = tuple(self.visible_to(user).values_list("pk", flat=True))
        return None if len(mine) == self.count() else mine


class Project(models.Model):
    """A team's or product's share of the work, as Sentry and Langfuse have them."""

    slug = models.SlugField(max_length=50, unique=True)
    name = models.CharField(max_length=100)
    groups = models.ManyToManyField(
        Group,
        blank=True,
        related_name="projects",
        help_text="Operators who may see this project (with their usual permissions); none: "
        "every operator",
    )
    created_at = models.DateTimeField(default=timezone.now)

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name or self.slug

    @property
    def is_default(self) -> bool:
        return self.pk == DEFAULT_PROJECT_ID

    @classmethod
    def default(cls) -> Project:
        return cls.objects.get(pk=DEFAULT_PROJECT_ID)
