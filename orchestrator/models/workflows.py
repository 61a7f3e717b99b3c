"""Workflows: one coordinator job each, made of subagent runs, and who coordinates it."""

from __future__ import annotations

from typing import Any

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from orchestrator.models.projects import DEFAULT_PROJECT_ID
from orchestrator.models.review import ReviewItem
from orchestrator.models.run_queries import CREATED_AFTER_MARGIN
from orchestrator.models.runs import Run
from orchestrator.models.tokens import ApiToken
from orchestrator.vocabulary import Coordinator, Origin

# The built-in coordinator steps a workflow started over a capability; any other is an agent's
# (`"coordinator": "external"`, or no capability). `dispatch.dispatch_due` repeats it on a join.
BUILT_IN_WORKFLOW = ~Q(capability="") & Q(coordinator=Coordinator.BUILT_IN)


class WorkflowQuerySet(models.QuerySet):
    def unfinished(self) -> WorkflowQuerySet:
        """Workflows the coordinator still steps: running or waiting for a review."""
        return self.filter(status__in=(Workflow.Status.RUNNING, Workflow.Status.AWAITING_REVIEW))

    def built_in(self) -> WorkflowQuerySet:
        return self.filter(BUILT_IN_WORKFLOW)

    def needing_step(self) -> WorkflowQuerySet:
        """Unfinished built-in workflows where a step has work now: a failed run without a decision
        (its step was lost), a resolution not applied, or nothing pending (fan out or settle)."""
        mine = {"workflow": OuterRef("pk")}
        undecided = Run.objects.filter(**mine, status=Run.Status.FAILED, decision="")
        unapplied = ReviewItem.objects.filter(**mine).unapplied()
        pending = Run.objects.filter(**mine, status__in=Run.PENDING)
        waiting = ReviewItem.objects.filter(**mine, state__in=ReviewItem.PENDING)
        idle = ~Exists(pending) & (Q(status=Workflow.Status.RUNNING) | ~Exists(waiting))
        due = Exists(undecided) | Exists(unapplied) | idle
        return self.unfinished().built_in().filter(due)


class Workflow(models.Model):
    """One coordinator job, made of subagent runs."""

    class Status(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        DEGRADED = "degraded"
        FAILED = "failed"
        AWAITING_REVIEW = "awaiting_review"
        CANCELLED = "cancelled"

    FINISHED = (Status.SUCCEEDED, Status.DEGRADED, Status.FAILED, Status.CANCELLED)

    name = models.CharField(max_length=200)
    goal = models.TextField(blank=True)
    input = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.RUNNING)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    coverage = models.JSONField(default=dict, blank=True, help_text="Per topic: verdict, runs, why")
    coverage_summary = models.CharField(max_length=500, blank=True)
    token = models.ForeignKey(
        ApiToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="workflows"
    )
    # What the coordinator fans out: every topic on the first `breadth` sources of the capability.
    topics = models.JSONField(default=list, blank=True)
    capability = models.CharField(max_length=100, blank=True)
    breadth = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1)], help_text="Sources asked per topic at first"
    )
    coordinator = models.CharField(
        max_length=10, choices=Coordinator.choices(), default=Coordinator.BUILT_IN
    )
    idempotency_key = models.CharField(max_length=255, blank=True)
    request_hash = models.CharField(
        max_length=64, blank=True, help_text="Hash of the request body, to refuse a reused key"
    )
    # The project of the token that started it; its runs belong to it too.
    project = models.ForeignKey(
        "Project", default=DEFAULT_PROJECT_ID, on_delete=models.PROTECT, related_name="workflows"
    )

    objects = WorkflowQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # POST /api/v1/workflows with an Idempotency-Key: a retry finds this row again.
            models.UniqueConstraint(
                fields=["token", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="workflow_idempotency_key_per_token",
            ),
        ]
        indexes = [
            # overview tile "workflows degraded" and the workflow list filtered by status
            models.Index(fields=["status", "created_at"], name="wf_status_created"),
            # the workflows list, newest first in keyset pages
            models.Index(fields=["created_at", "id"], name="wf_created_id"),
            # the sweeper's nudge: unfinished workflows untouched for a while
            models.Index(
                fields=["updated_at"],
                name="wf_unfinished_updated",
                condition=Q(status__in=["running", "awaiting_review"]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} #{self.pk}"

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED

    @property
    def is_built_in(self) -> bool:
        """Stepped by the built-in coordinator (BUILT_IN_WORKFLOW, for one loaded row)."""
        return bool(self.capability) and self.coordinator == Coordinator.BUILT_IN

    @property
    def kind_label(self) -> str:
        return "built-in coordinator" if self.is_built_in else "agent's own coordinator"

    @property
    def origin(self) -> Origin:
        return Origin.BUILT_IN if self.is_built_in else Origin.AGENT

    def sources_tried(self, topic: str) -> set[str]:
        """The sources any run of `topic` has used so far (a switch goes to another one)."""
        runs = self.runs.filter(topic=topic, created_at__gte=self.created_at - CREATED_AFTER_MARGIN)
        return set(runs.values_list("source", flat=True))

    def move_to(self, status: str, **fields: Any) -> bool:
        """Set an unfinished workflow's status with a conditional update; False if it finished."""
        changed = (
            Workflow.objects.filter(pk=self.pk)
            .exclude(status__in=self.FINISHED)
            .update(status=status, updated_at=timezone.now(), **fields)
        )
        if changed:
            self.status = status
            for name, value in fields.items():
                setattr(self, name, value)
        return bool(changed)
