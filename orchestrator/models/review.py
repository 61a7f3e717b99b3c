"""Human review: escalations waiting for an operator, whose resolutions feed back into the
coordinator. The model holds the state transitions; claiming and resolving as operator actions
(audit row, notification, the workflow's continuation) are `orchestrator.coordination.actions`."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.db import models
from django.db.models import Q
from django.utils import timezone

from orchestrator.models.projects import DEFAULT_PROJECT_ID
from orchestrator.models.runs import FailureType, Run
from orchestrator.models.tokens import ApiToken
from orchestrator.vocabulary import Delivery, FailureCategory, Origin

if TYPE_CHECKING:
    from orchestrator.models.delivery import WebhookDelivery


class ReviewItemQuerySet(models.QuerySet):
    def open(self) -> ReviewItemQuerySet:
        """Items still waiting for a decision (open or claimed), oldest first."""
        return self.filter(state__in=ReviewItem.PENDING).order_by("created_at", "id")

    def resolved(self) -> ReviewItemQuerySet:
        return self.filter(state=ReviewItem.State.RESOLVED).order_by("-resolved_at", "-id")

    def overdue(self, now: datetime) -> ReviewItemQuerySet:
        return self.open().filter(deadline_at__lte=now)

    def with_signature(self, signature: str) -> ReviewItemQuerySet:
        return self.open().filter(signature=signature)

    def resolvable_by(self, user: Any) -> ReviewItemQuerySet:
        """Pending items this user may decide: unclaimed, or claimed by them (never another's)."""
        return self.filter(ReviewItem.resolvable(user))

    def unapplied(self) -> ReviewItemQuerySet:
        return self.filter(state=ReviewItem.State.RESOLVED, continued_at__isnull=True)

    def blocking(self) -> ReviewItemQuerySet:
        """Items that keep a workflow open: waiting for a human, or resolved but not applied yet
        (a decision committed after a step read the resolutions must not find it settled). An
        item the work does not wait for (`blocking` false: a repair asked while the work went on
        on another source) never does."""
        return self.filter(blocking=True).filter(
            Q(state__in=ReviewItem.PENDING)
            | Q(state=ReviewItem.State.RESOLVED, continued_at__isnull=True)
        )

    def unclaimed_owned(self) -> ReviewItemQuerySet:
        """Open items an owner group has and nobody claimed: the reminder pass reads them."""
        return self.filter(state=ReviewItem.State.OPEN, owner_group__isnull=False)

    def for_token(self, token: ApiToken) -> ReviewItemQuerySet:
        return self.filter(token=token)

    def undelivered(self) -> ReviewItemQuerySet:
        """Resolutions no agent has picked up yet, the earliest decision first (the feed)."""
        return self.filter(state=ReviewItem.State.RESOLVED, delivered_at__isnull=True).order_by(
            "resolved_at", "id"
        )

    def pickup_overdue(self, now: datetime) -> ReviewItemQuerySet:
        """Agents' resolutions no agent picked up within RESOLUTION_PICKUP_TIMEOUT (the overview's
        "not picked up" tile and the list it opens): the agent may be gone."""
        return self.filter(ReviewItem.pickup_overdue_condition(now))

    def mark_continued(self, item_id: int, now: datetime) -> bool:
        """Mark a resolved item applied; True for the one caller that wins (the step's guard)."""
        return bool(
            self.filter(
                pk=item_id, state=ReviewItem.State.RESOLVED, continued_at__isnull=True
            ).update(continued_at=now)
        )


class ReviewItem(models.Model):
    """An escalation waiting for a human; its resolution feeds back into the coordinator."""

    class State(models.TextChoices):
        OPEN = "open"
        CLAIMED = "claimed"
        RESOLVED = "resolved"

    class Resolution(models.TextChoices):
        # Lowercase labels, as the decisions' (Django's default would capitalise).
        RETRY = "retry", "retry"
        RETRY_EDITED = "retry_edited", "retry with edited input"
        SWITCH_SOURCE = "switch_source", "switch source"
        ACCEPT_PARTIAL = "accept_partial", "accept partial results"
        ABORT = "abort", "abort"
        # A repair item's (one that blocks no work): they apply to what comes next.
        REENABLE_SOURCE = "reenable_source", "re-enable the source"
        DISMISS = "dismiss", "dismiss"

    PENDING = (State.OPEN, State.CLAIMED)

    # Indexed (Django's default), no database constraint: runs are partitioned (see Run).
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="review_items", db_constraint=False
    )
    workflow = models.ForeignKey(
        "Workflow", null=True, blank=True, on_delete=models.CASCADE, related_name="review_items"
    )
    reason = models.TextField()
    failure_type = models.CharField(
        max_length=20, choices=FailureType.choices, null=True, blank=True
    )
    signature = models.CharField(
        max_length=64, blank=True, help_text="Hash of source, failure type and normalised detail"
    )
    # The queue's facets, copied from the run when the item opens: filtering and counting open
    # items never joins the run table.
    source = models.CharField(max_length=100, blank=True)
    agent = models.CharField(max_length=100, blank=True)
    origin = models.CharField(max_length=10, choices=Origin.choices(), default=Origin.AGENT)
    state = models.CharField(max_length=10, choices=State.choices, default=State.OPEN)
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    resolution = models.CharField(max_length=20, choices=Resolution.choices, blank=True)
    edited_input = models.JSONField(null=True, blank=True)
    note = models.TextField(blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    fallback_applied = models.BooleanField(
        default=False, help_text="Resolved by the failure type's fallback after its deadline"
    )
    continued_at = models.DateTimeField(
        null=True, blank=True, help_text="When the coordinator applied the resolution (once)"
    )
    outcome = models.CharField(
        max_length=300, blank=True, help_text="What applying the resolution did (the timeline's)"
    )
    created_at = models.DateTimeField(default=timezone.now)
    blocking = models.BooleanField(
        default=True,
        help_text="Work waits on it. False: the work went on on another source and the item asks "
        "a person to repair the failing one (the policy's switch and escalate)",
    )
    # Who is asked to decide: the first owner rule matching the item, then the group's chain.
    owner_group = models.ForeignKey(
        "OwnerGroup", null=True, blank=True, on_delete=models.SET_NULL, related_name="items"
    )
    owned_since = models.DateTimeField(
        null=True, blank=True, help_text="When its owner group got it (reminders count from here)"
    )
    reminded_at = models.DateTimeField(
        null=True, blank=True, help_text="When its owner group was reminded of it"
    )
    # The token that reported the run picks the resolution up once: by an ack, or by a webhook.
    token = models.ForeignKey(
        ApiToken,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="review_items",
        db_index=False,
    )
    delivered_at = models.DateTimeField(
        null=True, blank=True, help_text="When the agent picked the resolution up (once)"
    )
    delivered_via = models.CharField(max_length=10, choices=Delivery.choices(), blank=True)
    # The run's project, copied when the item opens.
    project = models.ForeignKey(
        "Project",
        default=DEFAULT_PROJECT_ID,
        on_delete=models.PROTECT,
        related_name="review_items",
    )

    objects = ReviewItemQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        permissions = [("review", "Can claim and resolve review items and act on runs")]
        indexes = [
            # the review queue's keyset pages and facet counts, the overview's "open reviews"
            models.Index(
                fields=["created_at", "id"],
                name="review_pending_created",
                condition=Q(state__in=["open", "claimed"]),
            ),
            # the top bar's search: every item, newest first, in keyset pages
            models.Index(fields=["created_at", "id"], name="review_created"),
            # the queue's "resolved" tab: keyset pages, the latest decision first
            models.Index(
                fields=["resolved_at", "id"],
                name="review_resolved_at",
                condition=Q(state="resolved"),
            ),
            # grouping escalations with the same signature
            models.Index(fields=["signature", "state"], name="review_signature_state"),
            # GET /api/v1/reviews?state=resolved&delivered=false: a token's undelivered resolutions
            models.Index(
                fields=["token", "resolved_at", "id"],
                name="review_undelivered",
                condition=Q(state="resolved", delivered_at__isnull=True),
            ),
            # the overview's "resolutions not picked up" tile and the list it opens
            models.Index(
                fields=["resolved_at", "id"],
                name="review_agent_unpicked",
                condition=Q(state="resolved", delivered_at__isnull=True, origin="agent"),
            ),
            # GET /api/v1/reviews' other lists (a token's items by id) and deleting a token
            models.Index(fields=["token", "id"], name="review_token_id"),
            # the beat task applying fallbacks to pending items past their deadline
            models.Index(
                fields=["deadline_at"],
                name="review_pending_deadline",
                condition=Q(state__in=["open", "claimed"]),
            ),
            # the beat task reminding owner groups of unclaimed items and moving them on
            models.Index(
                fields=["owned_since"],
                name="review_unclaimed_owned",
                condition=Q(state="open", owner_group__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"review {self.pk} ({self.state}) for run {self.run_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is None:
            self.copy_facets()
        super().save(*args, **kwargs)

    def copy_facets(self) -> None:
        """Fill the queue's facets from the run and its workflow (once, when the item opens)."""
        run = self.run
        self.source = self.source or run.source
        self.agent = self.agent or run.agent
        self.workflow_id = self.workflow_id or run.workflow_id
        self.token_id = self.token_id or run.token_id
        workflow = self.workflow if self.workflow_id else None
        self.origin = workflow.origin if workflow is not None else Origin.AGENT

    @property
    def is_delivered(self) -> bool:
        return self.delivered_at is not None

    @staticmethod
    def pickup_timeout() -> timedelta:
        return timedelta(seconds=settings.RESOLUTION_PICKUP_TIMEOUT)

    @classmethod
    def pickup_overdue_condition(cls, now: datetime) -> Q:
        return Q(
            state=cls.State.RESOLVED,
            delivered_at__isnull=True,
            origin=Origin.AGENT,
            resolved_at__lte=now - cls.pickup_timeout(),
        )

    @property
    def is_pickup_overdue(self) -> bool:
        """Resolved for an agent's coordinator, and not picked up within the pickup timeout."""
        return (
            self.state == self.State.RESOLVED
            and not self.is_built_in
            and self.delivered_at is None
            and self.resolved_at is not None
            and self.resolved_at <= timezone.now() - self.pickup_timeout()
        )

    @property
    def webhook_or_none(self) -> WebhookDelivery | None:
        """The webhook delivery of this item's resolution, if its token has a callback URL."""
        try:
            return self.webhook
        except ObjectDoesNotExist:
            return None

    def acknowledge(self, via: str, now: datetime | None = None) -> bool:
        """Mark the resolution picked up by the agent, once; True for the one caller that won."""
        changed = ReviewItem.objects.filter(
            pk=self.pk, state=self.State.RESOLVED, delivered_at__isnull=True
        ).update(delivered_at=now or timezone.now(), delivered_via=via)
        self.refresh_from_db(fields=["delivered_at", "delivered_via"])
        return bool(changed)

    @property
    def is_pending(self) -> bool:
        return self.state in self.PENDING

    @property
    def is_built_in(self) -> bool:
        return self.origin == Origin.BUILT_IN

    @classmethod
    def resolvable(cls, user: Any) -> Q:
        """The condition of `ReviewItemQuerySet.resolvable_by`, for filtered aggregates."""
        mine = Q(state=cls.State.CLAIMED, assignee_id=getattr(user, "pk", None))
        return Q(state=cls.State.OPEN) | mine

    def claim(self, user: Any, now: datetime | None = None) -> bool:
        """Claim an open item for `user`; True for the one caller whose update changed it."""
        changed = ReviewItem.objects.filter(pk=self.pk, state=self.State.OPEN).update(
            state=self.State.CLAIMED, assignee=user, claimed_at=now or timezone.now()
        )
        self.refresh_from_db(fields=["state", "assignee", "claimed_at"])
        return bool(changed)

    def is_held_by(self, user: Any) -> bool:
        return self.state == self.State.CLAIMED and self.assignee_id == getattr(user, "pk", None)

    def mark_resolved(
        self,
        user: Any,
        resolution: str,
        note: str = "",
        edited_input: dict | None = None,
        failure_type: str | None = None,
        apply_to_group: bool = False,
    ) -> list[tuple[ReviewItem, dict[str, Any]]]:
        """Resolve this item (and, if asked, every pending item with its signature), each only if
        no other operator holds it; return each item this call resolved with its state before
        (none: another operator or the fallback was first). `failure_type` reclassifies an
        unclassified item."""
        if resolution not in self.Resolution.values:
            raise ValueError(f"unknown resolution {resolution!r}")
        if failure_type is not None and failure_type not in FailureType.values:
            raise ValueError(f"unknown failure type {failure_type!r}")
        if resolution != self.Resolution.RETRY_EDITED:
            edited_input = None  # only "retry with edited input" sends an input
        items = [self]
        if apply_to_group and self.signature:
            # Items another operator holds stay theirs: the group takes the rest, in this
            # item's project only (an operator may see no other).
            group = (
                ReviewItem.objects.with_signature(self.signature)
                .resolvable_by(user)
                .filter(project_id=self.project_id, blocking=self.blocking)
            )
            items += list(group.exclude(pk=self.pk))
        # Resolving an open item claims it for its resolver: the audit row's before and after
        # show the claim.
        changes = dict(
            resolution=resolution,
            note=note,
            edited_input=edited_input,
            resolved_by=user,
            assignee=user if getattr(user, "is_authenticated", False) else None,
        )
        # Each conditional update re-checks the claim: an item another operator holds, or took
        # meanwhile, stays theirs, whichever channel this resolution came from.
        mine = ReviewItem.resolvable(user)
        won = []
        for i in items:
            before = i._resolve_once(changes, failure_type, guard=mine)
            if before is not None:
                won.append((i, before))
        return won

    def mark_resolved_by_fallback(
        self, action: str, note: str, now: datetime
    ) -> dict[str, Any] | None:
        """Resolve an item left past its deadline with its type's fallback; return its state
        before if this call won, else None."""
        changes = {"resolution": action, "note": note, "resolved_by": None}
        return self._resolve_once(changes, fallback=True, now=now)

    def _resolve_once(
        self,
        changes: dict[str, Any],
        failure_type: str | None = None,
        fallback: bool = False,
        now: datetime | None = None,
        guard: Q | None = None,
    ) -> dict[str, Any] | None:
        before = self.snapshot()
        fields = changes | {"state": self.State.RESOLVED, "resolved_at": now or timezone.now()}
        if failure_type and self.failure_type == FailureCategory.UNCLASSIFIED:
            fields["failure_type"] = failure_type
        if fallback:
            fields["fallback_applied"] = True
        target = ReviewItem.objects.filter(pk=self.pk, state__in=self.PENDING)
        if guard is not None:
            target = target.filter(guard)
        if not target.update(**fields):
            return None
        self.refresh_from_db()
        return before

    def snapshot(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "resolution": self.resolution,
            "failure_type": self.failure_type,
            "assignee": self.assignee_id,
            "edited_input": self.edited_input,
            "fallback_applied": self.fallback_applied,
            "blocking": self.blocking,
        }
