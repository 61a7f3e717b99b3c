"""The run store: workflows, runs, routing policies, review items, API tokens, the outbox of
messages to send and the audit trail.

Choice values come from `orchestrator.vocabulary` (failure types are the classifier's taxonomy), so
the database, admin, API and templates share one vocabulary. One instance's behaviour is a model
method (`run.record_outcome`, `item.resolve`); behaviour over many is a named QuerySet method
(`Run.objects.wasted_retries()`), which the tiles, filters, /metrics and the API all call. Status
transitions are conditional updates; every index names the query it serves. What the coordinator
does with these rows lives in `orchestrator.coordination`, HTTP in `orchestrator.api`.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import IntegrityError, models, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.db.models.functions import Coalesce
from django.dispatch import Signal
from django.utils import timezone

from orchestrator import keyset, notify
from orchestrator.fingerprint import signature as failure_signature
from orchestrator.memo import LocalMemo
from orchestrator.vocabulary import (
    Action,
    Breaker,
    Coordinator,
    Delivery,
    FailureCategory,
    Jitter,
    Origin,
)

# The taxonomy as Django choices (labels for forms and the admin); the values are the classifier's.
FailureType = models.TextChoices(
    "FailureType", [(c.name, (c.value, c.value.replace("_", " "))) for c in FailureCategory]
)

# Years 1 to 9999 in UTC: what Python's datetime reads back. PostgreSQL stores times beyond them
# (and years BC), which no page or list could then show.
TIME_MIN = datetime.min.replace(tzinfo=UTC)
TIME_MAX = datetime.max.replace(tzinfo=UTC)

# Sent inside the transaction that resolves a review item (`ReviewItem.resolve`), with `item`; the
# coordinator continues the item's workflow once that transaction commits.
review_resolved = Signal()


def actor_label(actor: Any) -> str:
    """How the audit trail and reason sentences name who acted: a username, a token, 'system'."""
    return getattr(actor, "get_username", lambda: "")() or str(actor or "system")


# ---------------------------------------------------------------------------------------------
# Tokens


class ApiTokenQuerySet(models.QuerySet):
    def active(self) -> ApiTokenQuerySet:
        return self.filter(revoked_at__isnull=True)

    def authenticate(self, secret: str) -> ApiToken | None:
        """Return the active token whose secret this is, or None."""
        return self.active().filter(hashed=ApiToken.hash_secret(secret)).first()


class ApiTokenManager(models.Manager.from_queryset(ApiTokenQuerySet)):  # type: ignore[misc]
    def authenticate_cached(self, secret: str) -> ApiToken | None:
        """`authenticate`, remembered per process for API_TOKEN_CACHE_SECONDS.

        A revocation in this process is seen at once (`revoke` forgets every entry); in another
        process once its entry expires. Unknown secrets are remembered too, so that a client
        hammering with a bad token costs no query per request. A manager's own method: called
        as a queryset's, it built a QuerySet on every API request only to find the memo's entry.
        """
        hashed = ApiToken.hash_secret(secret)
        return _TOKENS.get(hashed, lambda: self.active().filter(hashed=hashed).first())


class ApiToken(models.Model):
    """A named credential for one agent or coordinator. Only a hash of the secret is stored."""

    PREFIX = "fs_"
    # Updating last_used_at on every request would add a write per call; once a minute is enough.
    LAST_USED_RESOLUTION = timedelta(seconds=60)

    name = models.CharField(max_length=100)
    hashed = models.CharField(max_length=64, unique=True, editable=False)
    hint = models.CharField(
        max_length=16, editable=False, help_text="First characters, to recognise it"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    # Where the resolutions of this token's review items are POSTed (README "Webhooks"), and
    # the key that signs them: encrypted with a key derived from SECRET_KEY, shown only once.
    callback_url = models.URLField(
        max_length=500, blank=True, help_text="Resolutions of this token's review items go here"
    )
    sealed_signing_secret = models.TextField(blank=True, editable=False)

    objects = ApiTokenManager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…)"

    @staticmethod
    def hash_secret(secret: str) -> str:
        # The secret has 256 bits of entropy, so a fast hash is safe and keeps auth O(1).
        return hashlib.sha256(secret.encode()).hexdigest()

    @classmethod
    def issue(cls, name: str, created_by: Any = None) -> tuple[ApiToken, str]:
        """Create a token; return it with its secret, which is never stored and shown only once."""
        secret = cls.PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            name=name, hashed=cls.hash_secret(secret), hint=secret[:10], created_by=created_by
        )
        return token, secret

    @classmethod
    def issue_audited(cls, name: str, actor: Any = None, note: str = "") -> tuple[ApiToken, str]:
        """Issue a token (see `issue`) and record its creation in the audit trail."""
        user = actor if getattr(actor, "is_authenticated", False) else None
        with transaction.atomic():
            token, secret = cls.issue(name, created_by=user)
            AuditEntry.record(
                actor=actor,
                action="apitoken.create",
                obj=token,
                before=None,
                after={"name": token.name, "hint": token.hint},
                note=note,
            )
        return token, secret

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def set_callback(self, url: str, actor: Any = None) -> str:
        """Point this token's resolutions at `url` with a new signing secret; return the secret
        (shown once: only its encrypted form is kept, to sign with)."""
        secret = "whsec_" + secrets.token_urlsafe(32)
        before = {"callback_url": self.callback_url}
        self.callback_url = url
        self.sealed_signing_secret = _fernet().encrypt(secret.encode()).decode()
        self.full_clean(exclude=["hashed", "hint"])
        with transaction.atomic():
            self.save(update_fields=["callback_url", "sealed_signing_secret"])
            AuditEntry.record(
                actor=actor,
                action="apitoken.callback",
                obj=self,
                before=before,
                after={"callback_url": url},
                note="a new signing secret was issued",
            )
        return secret

    def signing_secret(self) -> str:
        """The secret webhooks are signed with ("" if none was issued)."""
        if not self.sealed_signing_secret:
            return ""
        return _fernet().decrypt(self.sealed_signing_secret.encode()).decode()

    def revoke(self) -> bool:
        """Revoke the token; return False if it was already revoked."""
        _TOKENS.forget()
        changed = ApiToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        self.refresh_from_db(fields=["revoked_at"])
        transaction.on_commit(_TOKENS.forget)  # a lookup in between may have remembered it
        return bool(changed)

    def revoke_audited(self, actor: Any = None, note: str = "") -> bool:
        """Revoke the token with an audit row; return False if it was already revoked."""
        with transaction.atomic():
            if not self.revoke():
                return False
            AuditEntry.record(
                actor=actor,
                action="apitoken.revoke",
                obj=self,
                before={"revoked_at": None},
                after={"revoked_at": self.revoked_at.isoformat()},
                note=note,
            )
        return True

    def touch(self, now: datetime | None = None) -> None:
        """Record use, at most once per LAST_USED_RESOLUTION (no query at all in between)."""
        now = now or timezone.now()
        stale = now - self.LAST_USED_RESOLUTION
        if self.last_used_at is not None and self.last_used_at >= stale:
            return  # the row we just loaded is fresh: skip a query on every API request
        ApiToken.objects.filter(pk=self.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lt=stale)
        ).update(last_used_at=now)
        self.last_used_at = now


# Tokens by hashed secret, remembered per process: see `authenticate_cached`.
_TOKENS: LocalMemo[ApiToken | None] = LocalMemo(lambda: settings.API_TOKEN_CACHE_SECONDS)


def _fernet() -> Any:
    """The cipher of stored signing secrets, keyed by SECRET_KEY (a new SECRET_KEY means new
    signing secrets: `createtoken --callback` issues one)."""
    from cryptography.fernet import Fernet

    digest = hashlib.sha256(b"failsight webhook secrets\n" + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(digest))


# ---------------------------------------------------------------------------------------------
# Workflows and runs


# The one rule of who coordinates a workflow: the built-in coordinator steps a workflow started
# over a capability (`start_workflow`, `POST /api/v1/workflows`, which refuse a capability with no
# registered source); any other workflow is an agent's, whose runs agents report: one started
# with `"coordinator": "external"` (capability or not), or one with no capability. The review
# queue's origin (copied onto each item as it opens) and its resolutions read it, and the
# dispatcher's due-run query (`dispatch.dispatch_due`) states the same test on the joined row.
BUILT_IN_WORKFLOW = ~Q(capability="") & Q(coordinator=Coordinator.BUILT_IN)


# What follows a row (a workflow's runs, a run's later attempts) is created after it. A query on
# runs says so with this margin (the clocks of different processes) so PostgreSQL skips every run
# partition older than the row instead of planning and probing all of them.
CREATED_AFTER_MARGIN = timedelta(hours=1)


class WorkflowQuerySet(models.QuerySet):
    def unfinished(self) -> WorkflowQuerySet:
        """Workflows the coordinator still steps: running or waiting for a review."""
        return self.filter(status__in=(Workflow.Status.RUNNING, Workflow.Status.AWAITING_REVIEW))

    def built_in(self) -> WorkflowQuerySet:
        """Workflows the built-in coordinator steps (see BUILT_IN_WORKFLOW)."""
        return self.filter(BUILT_IN_WORKFLOW)

    def needing_step(self) -> WorkflowQuerySet:
        """Unfinished built-in workflows in which a step has something to do now.

        A failed run without a decision (its step was lost), a resolution not applied yet, or
        nothing left pending (fan out, or settle). A workflow whose runs are queued for later or
        held by a live lease, or that waits for a human, needs no step: the sweeper leaves it be.
        An agent's own workflow is never stepped: its coordinator is the agent's.
        """
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
    # POST /api/v1/workflows with an Idempotency-Key: a retried request finds this row again.
    idempotency_key = models.CharField(max_length=255, blank=True)
    request_hash = models.CharField(
        max_length=64, blank=True, help_text="Hash of the request body, to refuse a reused key"
    )

    objects = WorkflowQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # A retried start never makes a second workflow: the insert conflicts on this index.
            models.UniqueConstraint(
                fields=["token", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="workflow_idempotency_key_per_token",
            ),
        ]
        indexes = [
            # overview tile "workflows degraded" and the workflow list filtered by status
            models.Index(fields=["status", "created_at"], name="wf_status_created"),
            # the workflows list, newest first in keyset pages: without it every page sorted all
            # the workflows (with their counters) to keep thirty
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
        """What the workflow pages call its kind."""
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


class RunQuerySet(models.QuerySet):
    """Named sets of runs. Each is defined once, as a Q condition in `RunSets` (so the rollups can
    count it inside one GROUP BY), and read through these methods everywhere else."""

    def since(self, t: datetime) -> RunQuerySet:
        return self.filter(created_at__gte=t)

    def failed(self) -> RunQuerySet:
        return self.filter(status=Run.Status.FAILED)

    def failed_since(self, t: datetime) -> RunQuerySet:
        return self.failed().since(t)

    def succeeded(self) -> RunQuerySet:
        return self.filter(status=Run.Status.SUCCEEDED)

    def failures(self) -> RunQuerySet:
        """Runs that ended in failure: failed, or failed and escalated to a human."""
        return self.filter(RunSets.FAILURES)

    def valid_empty(self) -> RunQuerySet:
        """Runs whose query ran and found nothing: a success, never to be taken for a failure."""
        return self.filter(RunSets.VALID_EMPTY)

    def with_partial_results(self) -> RunQuerySet:
        """Failures that kept what they gathered before failing."""
        return self.filter(RunSets.PARTIAL)

    def retries(self) -> RunQuerySet:
        """Every attempt after the first of a task."""
        return self.filter(RunSets.RETRIES)

    def wasted_retries(self) -> RunQuerySet:
        """Retries that failed again."""
        return self.filter(RunSets.WASTED_RETRIES)

    def early_retries(self) -> RunQuerySet:
        """Retries started before their due time, i.e. before the provider's Retry-After."""
        return self.filter(RunSets.EARLY_RETRIES)

    def switched(self) -> RunQuerySet:
        """Runs the coordinator started on another source after a switch_source decision."""
        return self.filter(RunSets.SWITCHED)

    def avoided_retries(self) -> RunQuerySet:
        """Failures routed elsewhere than a retry: a blind policy would have retried each."""
        return self.filter(RunSets.AVOIDED_RETRIES)

    def futile_retries(self) -> RunQuerySet:
        """Failures retried although they said a retry cannot help (a credential refresh aside)."""
        return self.filter(RunSets.FUTILE_RETRIES)

    def retrying(self) -> RunQuerySet:
        """Queued retries waiting for their due time."""
        return self.filter(RunSets.RETRYING)

    def pending(self) -> RunQuerySet:
        """Runs not finished yet: queued or running."""
        return self.filter(status__in=Run.PENDING)

    def in_flight(self) -> RunQuerySet:
        """Runs started and not finished (a reported `running` run, or a worker's)."""
        return self.filter(status=Run.Status.RUNNING)

    def retryable_by_operator(self) -> RunQuerySet:
        """Finished runs without success, which an operator may retry."""
        return self.filter(status__in=Run.RETRYABLE_BY_OPERATOR)

    def claim_due(self, now: datetime) -> int:
        """Claim the due queued runs among these (queued → running); return how many were won."""
        return self.filter(status=Run.Status.QUEUED, due_at__lte=now).update(
            status=Run.Status.RUNNING, dispatched_at=now, lease_until=None, lease_owner=""
        )

    def reported(self) -> RunQuerySet:
        """Runs an agent reported over the API (a token), whatever coordinates them."""
        return self.filter(token__isnull=False)

    def coordinated(self) -> RunQuerySet:
        """Runs the built-in coordinator created and sends to its workers (no token)."""
        return self.filter(token__isnull=True)

    def lost_dispatches(self, before: datetime) -> RunQuerySet:
        """Runs sent before `before` whose task never took their lease: the message was lost.

        Only the coordinator's own runs: an agent's `running` run was never sent to a worker
        (no dispatch time, no lease) and its agent, not the sweeper, finishes it."""
        return self.coordinated().filter(
            status=Run.Status.RUNNING, lease_until__isnull=True, dispatched_at__lt=before
        )

    def lease_expired(self, now: datetime) -> RunQuerySet:
        """Started runs whose lease ran out: their worker died (or froze) mid-call (the
        coordinator's own runs only, as `lost_dispatches`)."""
        return self.coordinated().filter(status=Run.Status.RUNNING, lease_until__lt=now)

    def take_back(self, now: datetime) -> int:
        """Free the expired leases among these for a new delivery; return how many were taken.

        The run stays running with no lease, sent again at `now`: if that message is lost too,
        it is a lost dispatch like any other.
        """
        return self.lease_expired(now).update(lease_until=None, lease_owner="", dispatched_at=now)

    def by_failure_type(self) -> dict[str, int]:
        """Return {failure_type: count} over the failed runs of this queryset."""
        rows = (
            self.exclude(failure_type__isnull=True)
            .values_list("failure_type")
            .annotate(n=models.Count("id"))
            .order_by()
        )
        return dict(rows)

    def due(self, now: datetime) -> RunQuerySet:
        """Queued retries whose due time has come (the sweeper enqueues them)."""
        return self.filter(status=Run.Status.QUEUED, due_at__lte=now)

    def attempts_of(self, run: Run) -> RunQuerySet:
        """Every attempt of the same task as `run`, first to last."""
        root = run.retry_of_id or run.pk
        return self.filter(Q(pk=root) | Q(retry_of_id=root)).order_by("attempt", "id")

    def filtered(
        self,
        *,
        status: str | None = None,
        failure_type: str | None = None,
        source: str | None = None,
        agent: str | None = None,
        workflow: int | None = None,
        topic: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        valid_empty: bool | None = None,
        set: str | None = None,
        trace_id: str | None = None,
    ) -> RunQuerySet:
        """The runs list's filters (API and dashboard); None means "any". `until` is exclusive;
        `set` names one of the NAMED_SETS. `status` also takes the envelope's words: "ok" is a
        succeeded run, "error" a failure (failed, or failed and escalated).

        Each equality filter pairs with created_at in one of Run's indexes, so a window of one
        status / failure type / source / agent / workflow is an index range scan.
        """
        qs = self
        if status in ENVELOPE_STATUSES:
            qs, status = qs.filter(status__in=ENVELOPE_STATUSES[status]), None
        exact = {
            "status": status,
            "failure_type": failure_type,
            "source": source,
            "agent": agent,
            "workflow_id": workflow,
            "topic": topic,
            "trace_id": trace_id,
        }
        qs = qs.filter(**{name: value for name, value in exact.items() if value is not None})
        if since is not None:
            qs = qs.filter(created_at__gte=since)
        if until is not None:
            qs = qs.filter(created_at__lt=until)
        if valid_empty is True:
            qs = qs.valid_empty()
        elif valid_empty is False:
            qs = qs.exclude(status=Run.Status.SUCCEEDED, result_count=0)
        if set is not None:
            qs = getattr(qs, NAMED_SETS[set])()
        return qs

    def newest_first(self) -> RunQuerySet:
        return self.order_by("-created_at", "-id")

    def older_than(self, created_at: datetime, pk: int) -> RunQuerySet:
        """Runs after (created_at, pk) in newest-first order: the keyset condition."""
        return keyset.beyond(self, (created_at, pk), "created_at", descending=True)

    def keyset_page(
        self, limit: int, after: tuple[datetime, int] | None = None
    ) -> tuple[list[Run], tuple[datetime, int] | None]:
        """Return up to `limit` runs newest first after the key `after`, and the next page's key.

        Keyset pagination costs the same on page 1 and page 10,000 (no OFFSET), and equal
        timestamps neither repeat nor skip a run because the id breaks ties.
        """
        qs = self.newest_first()
        if after is not None:
            qs = qs.older_than(*after)
        rows = list(qs[: limit + 1])
        if len(rows) <= limit:
            return rows, None
        last = rows[limit - 1]
        return rows[:limit], (last.created_at, last.pk)


class Run(models.Model):
    """One attempt of one subagent on one source, with its structured outcome (the envelope).

    On PostgreSQL the table is partitioned by `created_at`, one partition a week by default
    (declarative range partitioning, `orchestrator.partitions`): beat creates the coming days'
    partitions ahead, a DEFAULT partition takes any row no partition covers (an insert never
    fails for want of one), and retention drops whole partitions (`RUNS_RETENTION_DAYS`)
    instead of deleting rows. The database's primary key is (id, created_at), as partitioning
    requires; `id` alone stays unique (one sequence) and is what Django and the API call the
    run's id.

    The three unique claims of a run (an idempotency key per token, a coordinator's slot, a
    retry's attempt number) must hold across partitions, which a partitioned unique index
    cannot do (it would have to include `created_at`). On PostgreSQL they live in `RunKey`, a
    small unpartitioned table filled by a statement-level trigger in the insert's own
    statement: a second claim of a key fails that statement with a unique violation, as the
    constraints below do on SQLite (unpartitioned, where they are the table's own indexes).
    Nothing points at a run with a database foreign key (see the fields below).
    """

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        SKIPPED = "skipped"
        ESCALATED = "escalated"
        CANCELLED = "cancelled"

    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.SKIPPED, Status.ESCALATED, Status.CANCELLED)
    PENDING = (Status.QUEUED, Status.RUNNING)
    # A failure is a run that failed, or failed and was escalated to a human.
    FAILURE = (Status.FAILED, Status.ESCALATED)
    RETRYABLE_BY_OPERATOR = (Status.FAILED, Status.ESCALATED, Status.CANCELLED)

    # No foreign key of the run table is a database constraint (`db_constraint=False`): on
    # PostgreSQL the table is partitioned by `created_at` (see the class docstring), and what
    # points at runs cannot name a unique `id` there, nor should every insert check its
    # references. Django keeps the relations (joins, CASCADE and SET NULL when deleting through
    # the ORM); the API checks references before inserting (`api.ingest.reference_errors`).
    # Each reference that is navigated is indexed below, so deleting a workflow or a run reads
    # only its own rows: (workflow, created_at), (retry_of, attempt), (switched_from).
    workflow = models.ForeignKey(
        Workflow,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="runs",
        db_index=False,
        db_constraint=False,
    )
    topic = models.CharField(max_length=200, blank=True, help_text="Workflow topic this run serves")
    capability = models.CharField(max_length=100, blank=True)
    agent = models.CharField(max_length=100)
    source = models.CharField(max_length=100)
    operation = models.CharField(max_length=200, blank=True)
    attempted = models.JSONField(default=dict, blank=True)
    attempt = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    retry_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="retries",
        help_text="The first attempt of the same task",
        db_index=False,
        db_constraint=False,
    )
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)

    result_count = models.PositiveIntegerField(default=0)
    results = models.JSONField(default=list, blank=True)

    failure_type = models.CharField(
        max_length=20, choices=FailureType.choices, null=True, blank=True
    )
    # The failure type as the agent wrote it, when that was an alias ("auth_error"): the run is
    # stored and counted under the canonical name, and the page shows what was sent.
    reported_failure_type = models.CharField(max_length=50, null=True, blank=True)
    # Which evidence decided the category (classifier.Signal: status, provider_code, type, …).
    signal = models.CharField(max_length=20, blank=True)
    retryable = models.BooleanField(null=True, blank=True)
    retry_after = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)])
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    provider_code = models.CharField(max_length=200, blank=True)
    exception_type = models.CharField(max_length=300, blank=True)
    detail = models.TextField(blank=True)
    exception_chain = models.JSONField(default=list, blank=True)
    partial_results = models.JSONField(default=list, blank=True)
    partial_count = models.PositiveIntegerField(default=0)
    alternatives = models.JSONField(default=list, blank=True)
    # The failure's group key (`orchestrator.fingerprint`), written with the failure itself; blank
    # for successes. The failure groups are folded from it and the group pages list runs by it.
    signature = models.CharField(max_length=32, blank=True, editable=False)

    decision = models.CharField(max_length=20, choices=Action.choices(), blank=True)
    decision_reason = models.TextField(blank=True)
    policy_version = models.PositiveIntegerField(null=True, blank=True)
    # The rest of the routing decision (`record_decision`), whoever asked for it: the built-in
    # coordinator, or an agent's own through `POST /api/v1/decisions` with the run's id.
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_delay = models.FloatField(null=True, blank=True, help_text="Seconds, for a retry")
    budget_spent = models.FloatField(
        null=True, blank=True, help_text="Retry-budget tokens the decision took"
    )
    switch_to = models.CharField(max_length=100, blank=True, help_text="A switch's next source")
    due_at = models.DateTimeField(null=True, blank=True, help_text="When a queued retry may run")

    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)

    # Who reported the run. Tokens are revoked, never deleted by the product, so the column
    # carries no index (it would cost every insert and serve no page); a token deleted in the
    # admin leaves its id on its runs as a label (DO_NOTHING) instead of rewriting every run.
    token = models.ForeignKey(
        ApiToken,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="runs",
        db_index=False,
        db_constraint=False,
    )
    # Coordinator bookkeeping. `slot` names a first attempt (workflow:topic:source) so a
    # redelivered step never fans out twice; `deliveries` counts task starts to park poison tasks.
    slot = models.CharField(max_length=300, blank=True)
    # The failed run whose switch_source decision started this one: "did switching help?" on the
    # overview becomes a column test instead of a correlated subquery per run.
    switched_from = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )
    deliveries = models.PositiveSmallIntegerField(default=0)
    calls = models.PositiveSmallIntegerField(default=0, help_text="Source calls, local retries too")
    dispatched_at = models.DateTimeField(null=True, blank=True)
    # The lease of the delivery running this run: renewed by its heartbeat while the source call
    # is in flight; once it has run out, the sweeper takes the run back (its worker died).
    lease_until = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(
        max_length=200, blank=True, help_text="host:pid of the worker process holding the lease"
    )
    idempotency_key = models.CharField(max_length=255, blank=True)
    request_hash = models.CharField(
        max_length=64, blank=True, help_text="Hash of the reported body, to refuse a reused key"
    )
    # The OpenTelemetry span this run is (POST /otlp/v1/traces) or was reported from: lowercase
    # hex, empty when the run came without one. The run page links the trace to the operators'
    # tracing tool (settings.TRACE_URL_TEMPLATE).
    trace_id = models.CharField(max_length=32, blank=True)
    span_id = models.CharField(max_length=16, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # The three unique claims: the table's own indexes on SQLite; on PostgreSQL the
            # migration replaces them with `RunKey` (see the class docstring).
            # A retried report never duplicates a run.
            models.UniqueConstraint(
                fields=["token", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="run_idempotency_key_per_token",
            ),
            # A redelivered coordinator step never creates a second first attempt of a slot...
            models.UniqueConstraint(fields=["slot"], condition=~Q(slot=""), name="run_unique_slot"),
            # ...nor a second row for the same retry (NULL retry_of rows are first attempts).
            models.UniqueConstraint(
                fields=["retry_of", "attempt"],
                condition=Q(retry_of__isnull=False),
                name="run_unique_retry_attempt",
            ),
            # A reported time outside what Python can read back would break every page and list
            # showing the run; the API refuses it first, this keeps any other writer honest.
            *(
                models.CheckConstraint(
                    condition=Q(**{f"{name}__isnull": True})
                    | Q(**{f"{name}__gte": TIME_MIN, f"{name}__lte": TIME_MAX}),
                    name=f"run_{name}_readable",
                )
                for name in ("started_at", "finished_at")
            ),
        ]
        # Each index's query and its measured write cost: docs/run-indexes.md
        # (`benchmarks/ingest.py --index-costs`). Partial wherever most runs (successes, runs
        # reported without a workflow or a trace) have nothing to find.
        indexes = [
            # runs list (newest first, keyset on created_at, id) and time-window counts
            models.Index(fields=["created_at", "id"], name="run_created_id"),
            # runs filtered by a status other than succeeded within a window, the in-flight view
            # and the sweeper's pending runs; a succeeded filter reads run_created_id (most runs)
            models.Index(
                fields=["status", "created_at"],
                name="run_status_unfinished",
                condition=~Q(status="succeeded"),
            ),
            # runs filtered by failure type; failures only
            models.Index(
                fields=["failure_type", "created_at"],
                name="run_ftype_created",
                condition=Q(failure_type__isnull=False),
            ),
            # runs filtered by source / agent (prefixes resolved to names) and the known names'
            # skip scan behind the filter's suggestions
            models.Index(fields=["source", "created_at"], name="run_source_created"),
            models.Index(fields=["agent", "created_at"], name="run_agent_created"),
            # a workflow's runs (its page, its coverage, its step) and deleting a workflow;
            # runs reported without a workflow never enter it
            models.Index(
                fields=["workflow", "created_at"],
                name="run_workflow_created",
                condition=Q(workflow__isnull=False),
            ),
            # the attempts of a task (`attempts_of`, the run page's timeline), the API's check
            # that a retry's attempt is free, and deleting a first attempt (SET NULL)
            models.Index(
                fields=["retry_of", "attempt"],
                name="run_retry_of_attempt",
                condition=Q(retry_of__isnull=False),
            ),
            # the runs of one trace, newest first: GET /runs?trace_id=, the runs page's trace
            # filter and the run page's "runs of this trace" link. One span's run is looked up
            # within its trace (trace_id, then span_id among a trace's few rows); exporter
            # retries are caught by the idempotency key's unique claim, not here. Partial: runs
            # without a trace (most REST reports) add nothing to it.
            models.Index(
                fields=["trace_id", "created_at"],
                name="run_trace_created",
                condition=~Q(trace_id=""),
            ),
            # the sweeper's "queued retries that are due" and the "still retrying" view
            models.Index(fields=["due_at"], name="run_due_queued", condition=Q(status="queued")),
            # the sweeper's "sent but never started" safety net (a lost message)
            models.Index(
                fields=["dispatched_at"],
                name="run_dispatched_unleased",
                condition=Q(status="running", lease_until__isnull=True),
            ),
            # the sweeper's "lease ran out" safety net (a dead worker)
            models.Index(
                fields=["lease_until"], name="run_lease_running", condition=Q(status="running")
            ),
            # a failure group's runs, newest first, and the runs list's `group` filter; only
            # failures carry a signature, so successes never enter (or cost) this index
            models.Index(
                fields=["signature", "created_at"],
                name="run_signature_created",
                condition=~Q(signature=""),
            ),
            # "did the switch recover it?" (the failure groups' fold looks up the run a switch
            # started from the failed one) and deleting a run (the SET NULL of this self key);
            # only switched runs enter it
            models.Index(
                fields=["switched_from"],
                name="run_switched_from",
                condition=Q(switched_from__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} {self.agent}@{self.source} {self.status}"

    @property
    def is_valid_empty(self) -> bool:
        return self.status == self.Status.SUCCEEDED and self.result_count == 0

    @property
    def is_pending(self) -> bool:
        return self.status in self.PENDING

    @property
    def signal_label(self) -> str:
        """Which evidence decided the failure type, in words ("provider code")."""
        return self.signal.replace("_", " ")

    @property
    def is_failure(self) -> bool:
        return self.status in self.FAILURE

    @property
    def trace_url(self) -> str | None:
        """The trace in the operators' tracing tool (settings.TRACE_URL_TEMPLATE), if both exist."""
        template = settings.TRACE_URL_TEMPLATE
        if not (template and self.trace_id):
            return None
        return template.replace("{trace_id}", self.trace_id).replace("{span_id}", self.span_id)

    @property
    def root_id(self) -> int:
        return self.retry_of_id or self.pk

    def failure_signature(self) -> str:
        """This run's failure group key, or "" for a run that is not a failure."""
        if not self.failure_type:
            return ""
        return failure_signature(self.source, self.failure_type, self.detail)

    def transition(self, old: str | tuple[str, ...], new: str, **fields: Any) -> bool:
        """Move from `old` to `new` with a conditional update; return False if another won."""
        olds = (old,) if isinstance(old, str) else old
        changed = Run.objects.filter(pk=self.pk, status__in=olds).update(status=new, **fields)
        if changed:
            self.status = new
            for name, value in fields.items():
                setattr(self, name, value)
        return bool(changed)

    def start(self, now: datetime, owner: str, until: datetime, take_from: str = "") -> int | None:
        """Take this running run's lease for one delivery; return its number (None: held).

        The lease is free when nobody holds it, when it has run out, when `owner` holds it
        already (a retry of a task that failed on a database error), or when it is held by
        `take_from` (a holder the caller knows to be dead). Every start counts as a delivery,
        so a run never executes more often than its `deliveries` say.
        """
        free = Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(lease_owner=owner)
        if take_from:
            free |= Q(lease_owner=take_from)
        started = (
            Run.objects.filter(pk=self.pk, status=self.Status.RUNNING)
            .filter(free)
            .update(
                deliveries=F("deliveries") + 1,
                started_at=Coalesce(F("started_at"), now),
                lease_until=until,
                lease_owner=owner,
            )
        )
        self.refresh_from_db(
            fields=["deliveries", "started_at", "status", "lease_until", "lease_owner"]
        )
        return self.deliveries if started and self.lease_owner == owner else None

    def renew_lease(self, delivery: int, owner: str, until: datetime) -> bool:
        """Extend the lease of delivery number `delivery` (held by `owner`, who keeps it even if
        the sweeper freed it meanwhile); False once another delivery has started."""
        return bool(
            Run.objects.filter(pk=self.pk, status=self.Status.RUNNING, deliveries=delivery).update(
                lease_until=until, lease_owner=owner
            )
        )

    def previous_failure_type(self) -> str | None:
        """The failure type of the attempt before this one of the same task, if any."""
        if self.attempt <= 1:
            return None
        previous = Run.objects.attempts_of(self).filter(attempt__lt=self.attempt).last()
        return previous.failure_type if previous else None

    def transition_fenced(self, delivery: int | None, new: str, **fields: Any) -> bool:
        """Finish a running run, only while delivery `delivery` holds it (None: whoever does)."""
        if delivery is None:
            return self.transition(self.Status.RUNNING, new, **fields)
        fields |= {"lease_until": None, "lease_owner": ""}
        changed = Run.objects.filter(
            pk=self.pk, status=self.Status.RUNNING, deliveries=delivery
        ).update(status=new, **fields)
        if changed:
            self.status = new
            for name, value in fields.items():
                setattr(self, name, value)
        return bool(changed)

    def outcome_fields(self, envelope: dict[str, Any], finished_at: datetime) -> dict[str, Any]:
        """The columns an envelope sets on a finished run, its status included."""
        ok = envelope.get("status") == "ok"
        results = list(envelope.get("results") or []) if ok else []
        partial = list(envelope.get("partial_results") or [])
        started = self.started_at or finished_at
        failure_type = None if ok else envelope.get("failure_type") or FailureCategory.UNCLASSIFIED
        detail = envelope.get("detail") or ""
        return dict(
            status=self.Status.SUCCEEDED if ok else self.Status.FAILED,
            results=results,
            result_count=len(results),
            failure_type=failure_type,
            signature="" if ok else failure_signature(self.source, failure_type, detail),
            retryable=None if ok else envelope.get("retryable"),
            retry_after=None if ok else envelope.get("retry_after"),
            signal="" if ok else envelope.get("signal") or "",
            status_code=envelope.get("status_code"),
            provider_code=envelope.get("provider_code") or "",
            exception_type=envelope.get("exception_type") or "",
            detail=detail,
            exception_chain=list(envelope.get("chain") or []),
            partial_results=partial,
            partial_count=len(partial),
            alternatives=list(envelope.get("alternatives") or []),
            attempted=envelope.get("attempted") or self.attempted,
            finished_at=finished_at,
            duration_ms=max(0.0, (finished_at - started).total_seconds() * 1000),
            calls=envelope.get("calls", self.calls),
        )

    def record_outcome(
        self,
        envelope: dict[str, Any],
        finished_at: datetime,
        calls: int,
        delivery: int | None = None,
    ) -> bool:
        """Store a subagent's envelope on this running run, once; False if already recorded (or
        if another delivery than `delivery` took the run over meanwhile)."""
        fields = self.outcome_fields(envelope | {"calls": calls}, finished_at)
        return self.transition_fenced(delivery, fields.pop("status"), **fields)

    def record_decision(
        self,
        action: str,
        reason: str,
        policy_version: int | None,
        *,
        delay: float | None = None,
        budget_spent: float = 0.0,
        switch_to: str | None = None,
        now: datetime | None = None,
    ) -> bool:
        """Write the routing decision on this finished run, once: the one place both the
        built-in coordinator and an agent's `POST /decisions` store one. False if the run
        already had a decision (the conditional update's loser, whose caller rolls back what it
        spent deciding)."""
        fields = {
            "decision": action,
            "decision_reason": reason,
            "policy_version": policy_version,
            "decided_at": now or timezone.now(),
            "decision_delay": delay,
            "budget_spent": budget_spent,
            "switch_to": switch_to or "",
        }
        changed = Run.objects.filter(pk=self.pk, decision="").update(**fields)
        if changed:
            for name, value in fields.items():
                setattr(self, name, value)
        return bool(changed)

    @property
    def decision_refresh(self) -> bool:
        """A retry of an auth failure: routing retries one only after refreshing credentials."""
        return self.decision == Action.RETRY and self.failure_type == FailureCategory.AUTH_FAILURE

    def stored_decision(self) -> dict[str, Any]:
        """The recorded decision in the shape `POST /decisions` answers with."""
        return {
            "action": self.decision,
            "delay_seconds": self.decision_delay or 0.0,
            "reason": self.decision_reason,
            "policy_version": self.policy_version or 1,
            "refresh": self.decision_refresh,
            "switch_to": self.switch_to or None,
            "budget_spent": self.budget_spent or 0.0,
            "decided_at": self.decided_at,
        }

    @property
    def is_reported(self) -> bool:
        """Reported by an agent over the API (a token), not run by the built-in coordinator."""
        return self.token_id is not None

    def finish_reported(
        self, envelope: dict[str, Any], finished_at: datetime, **extra: Any
    ) -> bool:
        """Finish an agent's running run with its envelope (`PATCH /api/v1/runs/{id}`), once;
        False if it had finished already. `extra` sets other columns (duration, the failure
        type as sent)."""
        fields = self.outcome_fields(envelope, finished_at) | extra
        fields.pop("calls")
        return self.transition(self.Status.RUNNING, fields.pop("status"), **fields)

    def same_outcome(self, envelope: dict[str, Any]) -> bool:
        """True if this finished run already holds this outcome (a repeated finish)."""
        fields = self.outcome_fields(envelope, self.finished_at or timezone.now())
        return all(getattr(self, name) == fields[name] for name in FINISH_COMPARED)

    def overrule_decision(self, action: str, reason: str) -> None:
        """Replace the decision an operator overrules (an escalation by hand)."""
        Run.objects.filter(pk=self.pk).exclude(decision=action).update(
            decision=action, decision_reason=reason
        )
        self.decision, self.decision_reason = action, reason


# What a repeated `PATCH /runs/{id}` is compared on: the same outcome is a replay, another one
# a conflict (not the finish time: a client's retry may say a later one).
FINISH_COMPARED = (
    "status",
    "failure_type",
    "results",
    "retryable",
    "retry_after",
    "status_code",
    "provider_code",
    "exception_type",
    "detail",
    "partial_results",
    "alternatives",
)

# The envelope's two words for a run's outcome, as filters over run statuses.
ENVELOPE_STATUSES = {"ok": (Run.Status.SUCCEEDED,), "error": Run.FAILURE}

# The named sets a client may ask for by name (GET /api/v1/runs?set=…): name → RunQuerySet method.
NAMED_SETS = {
    "failures": "failures",
    "valid_empty": "valid_empty",
    "partial": "with_partial_results",
    "retries": "retries",
    "wasted_retries": "wasted_retries",
    "early_retries": "early_retries",
    "switched": "switched",
    "avoided_retries": "avoided_retries",
    "futile_retries": "futile_retries",
    "retrying": "retrying",
    "in_flight": "in_flight",
}


class RunKey(models.Model):
    """One unique claim of a run on PostgreSQL, where the run table is partitioned (see `Run`).

    `key` is `i:<token id>:<idempotency key>`, `s:<slot>` or `r:<first attempt>:<attempt>`;
    a statement-level trigger on the run table writes a run's claims in the statement that
    inserts it (and removes them with it), so a second claim fails that statement with a unique
    violation. The batch insert skips keys already claimed here, and finds the stored run of a
    repeated key through it (`run_id`, `created_at`: one partition read). Retention deletes the
    claims of the days it drops (a BRIN index on `created_at`, PostgreSQL only). Unused on
    SQLite, whose run table keeps its own unique constraints.
    """

    # Looked up by equality only: migration 0017 drops the LIKE index Django builds beside it
    # on PostgreSQL (a schema change to this field would build it again: drop it again).
    key = models.CharField(max_length=400, primary_key=True)
    run_id = models.BigIntegerField()
    created_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.key} → run {self.run_id}"


class RunSets:
    """The named sets of runs as Q conditions: the one definition of each (see RunQuerySet).

    A *failure* is a run that failed or was escalated; *retries* are attempts after the first;
    a *wasted* retry failed again; an *early* retry started before its due time (before the
    provider's Retry-After); a *switched* run started on another source after a switch_source
    decision; an *avoided* retry is a failure routed elsewhere than a retry (switch, escalate,
    abort, accept partial), which a blind policy would have retried; a *futile* retry is a
    failure that said a retry cannot help (retryable false) and was retried anyway, except an
    auth failure retried once after refreshing its credentials (the request changes; routing
    retries an auth failure in no other way). The README's "What an operator sees" repeats
    these definitions.
    """

    FAILURES = Q(status__in=Run.FAILURE)
    VALID_EMPTY = Q(status=Run.Status.SUCCEEDED, result_count=0)
    PARTIAL = FAILURES & Q(partial_count__gt=0)
    RETRIES = Q(retry_of__isnull=False)
    WASTED_RETRIES = RETRIES & FAILURES
    EARLY_RETRIES = RETRIES & Q(started_at__lt=F("due_at"))
    SWITCHED = Q(switched_from__isnull=False)
    AVOIDING_DECISIONS = (
        Action.SWITCH_SOURCE,
        Action.ESCALATE,
        Action.ABORT,
        Action.ACCEPT_PARTIAL,
    )
    AVOIDED_RETRIES = FAILURES & Q(decision__in=AVOIDING_DECISIONS)
    FUTILE_RETRIES = (
        FAILURES
        & Q(retryable=False, decision=Action.RETRY)
        & ~Q(failure_type=FailureCategory.AUTH_FAILURE)
    )
    RETRYING = Q(status=Run.Status.QUEUED, retry_of__isnull=False, due_at__isnull=False)


class WorkflowCounter(models.Model):
    """A workflow's runs and failures, folded from `WorkflowRunDelta` (`orchestrator.counters`):
    the workflows list reads these instead of counting every workflow's runs. PostgreSQL only."""

    # Not a foreign key: a deleted workflow's counter goes with the fold, not with a cascade
    # that would race the triggers writing its runs' last deltas.
    workflow_id = models.BigIntegerField(primary_key=True)
    runs = models.BigIntegerField(default=0)
    failures = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"workflow {self.workflow_id}: {self.runs} runs, {self.failures} failures"


class WorkflowRunDelta(models.Model):
    """A change of a workflow's counts, appended by the run table's triggers in the writer's own
    transaction (inserts never conflict); folded into `WorkflowCounter` by a periodic task."""

    workflow_id = models.BigIntegerField()
    runs = models.BigIntegerField(default=0)
    failures = models.BigIntegerField(default=0)

    class Meta:
        indexes = [
            # the workflows list adds each listed workflow's pending deltas to its counter
            models.Index(fields=["workflow_id"], name="workflowrundelta_workflow"),
        ]

    def __str__(self) -> str:
        return f"workflow {self.workflow_id}: {self.runs:+} runs, {self.failures:+} failures"


# ---------------------------------------------------------------------------------------------
# Routing policy


# The version API answers announce, remembered per process: see `announced_version`.
_POLICY_VERSION: LocalMemo[int] = LocalMemo(lambda: settings.POLICY_VERSION_CACHE_SECONDS)


class PolicyState(models.Model):
    """The single row holding the routing policy's version, bumped on every policy change."""

    version = models.PositiveIntegerField(default=1)
    changed_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"policy version {self.version}"

    @classmethod
    def current_version(cls) -> int:
        row = cls.objects.filter(pk=1).values_list("version", flat=True).first()
        return row or 1

    @classmethod
    def announced_version(cls) -> int:
        """The version as every API answer announces it: `current_version`, remembered per
        process for POLICY_VERSION_CACHE_SECONDS (an edit in this process is seen at once)."""
        return _POLICY_VERSION.get(None, cls.current_version)

    @classmethod
    def bump(cls) -> int:
        """Bump the version inside the caller's transaction; return the new version."""
        _POLICY_VERSION.forget()
        transaction.on_commit(_POLICY_VERSION.forget)
        cls.objects.get_or_create(pk=1)
        cls.objects.filter(pk=1).update(version=F("version") + 1, changed_at=timezone.now())
        return cls.current_version()


class PolicyVersionQuerySet(models.QuerySet):
    def newest_first(self) -> PolicyVersionQuerySet:
        return self.order_by("-version")


class PolicyVersion(models.Model):
    """The whole routing table and every provider override as they stood at one policy version.

    Written in the transaction that bumps the version (`save_policy_change`,
    `delete_policy_object`, `restore_policy_version`), so the history holds every version with
    its full content: a version's diff is a comparison with the one before, and restoring one is
    writing its content back as a new version.
    """

    version = models.PositiveIntegerField(unique=True)
    policies = models.JSONField(default=list, help_text="RoutingPolicy.snapshot() of every row")
    overrides = models.JSONField(default=list, help_text="ProviderOverride.snapshot() of every row")
    actor_label = models.CharField(max_length=150, blank=True)
    note = models.TextField(blank=True)
    restored_from = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = PolicyVersionQuerySet.as_manager()

    class Meta:
        ordering = ["-version"]

    def __str__(self) -> str:
        return f"policy version {self.version}"

    @classmethod
    def capture(
        cls, version: int, actor: Any = None, note: str = "", restored_from: int | None = None
    ) -> PolicyVersion:
        """Record the current rows under `version` (inside the transaction that bumped it)."""
        return cls.objects.create(
            version=version,
            policies=[p.snapshot() for p in RoutingPolicy.objects.order_by("failure_type")],
            overrides=[o.snapshot() for o in ProviderOverride.objects.all()],
            actor_label=actor_label(actor),
            note=note,
            restored_from=restored_from,
        )

    def rules_by_type(self) -> dict[str, dict[str, Any]]:
        return {row["failure_type"]: row for row in self.policies}

    def overrides_by_match(self) -> dict[tuple[str, str, str], dict[str, Any]]:
        return {(o["provider"], o["match_on"], o["match_value"]): o for o in self.overrides}

    def changes_since(self, older: PolicyVersion | None) -> list[dict[str, Any]]:
        """What differs from `older`: one entry per changed field of a routing row, per override
        added, removed or changed (`older` None: nothing to compare with, no entry)."""
        if older is None:
            return []
        changes: list[dict[str, Any]] = []
        old_rules, new_rules = older.rules_by_type(), self.rules_by_type()
        for ftype in sorted(old_rules.keys() | new_rules.keys()):
            before, after = old_rules.get(ftype, {}), new_rules.get(ftype, {})
            for key in sorted(before.keys() | after.keys()):
                if key != "failure_type" and before.get(key) != after.get(key):
                    old, new = before.get(key), after.get(key)
                    changes.append({"what": f"{ftype}.{key}", "before": old, "after": new})
        old_o, new_o = older.overrides_by_match(), self.overrides_by_match()
        for match in sorted(old_o.keys() | new_o.keys()):
            if old_o.get(match) != new_o.get(match):
                what = "override " + ":".join(part or "*" for part in match)
                old, new = old_o.get(match), new_o.get(match)
                changes.append({"what": what, "before": old, "after": new})
        return changes


class RoutingPolicy(models.Model):
    """How the coordinator routes one failure type: backoff, attempts, and what to do after."""

    Jitter = Jitter

    EXHAUSTED_ACTIONS = [
        (a.value, a.label)
        for a in (Action.ESCALATE, Action.SWITCH_SOURCE, Action.ACCEPT_PARTIAL, Action.ABORT)
    ]
    REVIEW_FALLBACKS = [(a.value, a.label) for a in (Action.ACCEPT_PARTIAL, Action.ABORT)]

    failure_type = models.CharField(max_length=20, choices=FailureType.choices, unique=True)
    max_attempts = models.PositiveSmallIntegerField(
        validators=[MinValueValidator(1), MaxValueValidator(20)],
        help_text="Attempts in all, the first included (1 means never retry)",
    )
    base_delay = models.FloatField(validators=[MinValueValidator(0)], help_text="Seconds")
    max_delay = models.FloatField(validators=[MinValueValidator(0)], help_text="Seconds")
    multiplier = models.FloatField(default=2.0, validators=[MinValueValidator(1)])
    jitter = models.CharField(max_length=8, choices=Jitter.choices(), default=Jitter.FULL)
    action_when_exhausted = models.CharField(max_length=20, choices=EXHAUSTED_ACTIONS)
    hard_fail = models.BooleanField(
        default=False, help_text="Never retried blindly (the same request cannot succeed)"
    )
    review_deadline = models.PositiveIntegerField(
        default=24 * 3600, help_text="Seconds a review item may wait before its fallback applies"
    )
    review_fallback = models.CharField(
        max_length=20, choices=REVIEW_FALLBACKS, default=Action.ACCEPT_PARTIAL
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "routing policies"
        permissions = [("edit_policies", "Can edit routing policies and provider overrides")]

    def __str__(self) -> str:
        return f"policy for {self.failure_type}"

    def clean(self) -> None:
        both = self.max_delay is not None and self.base_delay is not None
        if both and self.max_delay < self.base_delay:
            raise ValidationError({"max_delay": "The maximum delay must be ≥ the base delay."})
        if self.hard_fail and self.max_attempts and self.max_attempts > 1:
            raise ValidationError(
                {"max_attempts": "A hard-fail type is never retried: use 1 attempt."}
            )

    def snapshot(self) -> dict[str, Any]:
        """The audited, cached, JSON-ready form of this row."""
        return {
            "failure_type": self.failure_type,
            "max_attempts": self.max_attempts,
            "base_delay": self.base_delay,
            "max_delay": self.max_delay,
            "multiplier": self.multiplier,
            "jitter": self.jitter,
            "action_when_exhausted": self.action_when_exhausted,
            "hard_fail": self.hard_fail,
            "review_deadline": self.review_deadline,
            "review_fallback": self.review_fallback,
        }


class ProviderOverride(models.Model):
    """A provider-specific rule mapping a signal onto the taxonomy, consulted before core rules."""

    class MatchOn(models.TextChoices):
        EXCEPTION_TYPE = "exception_type", "exception type name"
        STATUS_CODE = "status_code", "status code"
        PROVIDER_CODE = "provider_code", "provider error code"

    provider = models.CharField(
        max_length=100, blank=True, help_text="Source or provider it applies to; blank for all"
    )
    match_on = models.CharField(max_length=20, choices=MatchOn.choices)
    match_value = models.CharField(max_length=300)
    failure_type = models.CharField(max_length=20, choices=FailureType.choices)
    retryable = models.BooleanField(
        null=True, blank=True, help_text="Blank: the failure type's default"
    )
    note = models.CharField(max_length=300, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["provider", "match_on", "match_value"]
        constraints = [
            models.UniqueConstraint(
                fields=["provider", "match_on", "match_value"], name="override_unique_match"
            )
        ]

    def __str__(self) -> str:
        scope = self.provider or "any provider"
        return f"{scope}: {self.match_on}={self.match_value} → {self.failure_type}"

    def clean(self) -> None:
        if self.match_on == self.MatchOn.STATUS_CODE:
            try:
                code = int(self.match_value)
            except (TypeError, ValueError):
                raise ValidationError({"match_value": "A status code is a number."}) from None
            if not 100 <= code <= 599:
                raise ValidationError({"match_value": "A status code lies between 100 and 599."})

    @classmethod
    def best_signal(
        cls, provider_code: str, status_code: int | None, exception_type: str
    ) -> tuple[str, str]:
        """The most reliable signal a run carried: provider code, then status, then type name."""
        if provider_code:
            return cls.MatchOn.PROVIDER_CODE, provider_code[:300]
        if status_code:
            return cls.MatchOn.STATUS_CODE, str(status_code)
        return cls.MatchOn.EXCEPTION_TYPE, (exception_type or "")[:300]

    def snapshot(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "match_on": self.match_on,
            "match_value": self.match_value,
            "failure_type": self.failure_type,
            "retryable": self.retryable,
            "note": self.note,
            "enabled": self.enabled,
        }


class SourceHealth(models.Model):
    """Per source: the retry budget (a token bucket) and the circuit breaker, with settings."""

    Breaker = Breaker

    source = models.CharField(max_length=100, unique=True)
    # Retry budget as in the AWS SDKs' standard retry mode: a retry costs tokens, a success refunds.
    budget_capacity = models.FloatField(default=500, validators=[MinValueValidator(0)])
    budget_tokens = models.FloatField(default=500, validators=[MinValueValidator(0)])
    retry_cost = models.FloatField(default=5, validators=[MinValueValidator(0)])
    timeout_retry_cost = models.FloatField(default=10, validators=[MinValueValidator(0)])
    success_refund = models.FloatField(default=1, validators=[MinValueValidator(0)])
    # Circuit breaker: open after N consecutive failures, probe after the cool-down.
    breaker_state = models.CharField(
        max_length=10, choices=Breaker.choices(), default=Breaker.CLOSED
    )
    breaker_threshold = models.PositiveIntegerField(default=5, validators=[MinValueValidator(1)])
    breaker_cooldown = models.FloatField(default=30, validators=[MinValueValidator(0)])
    consecutive_failures = models.PositiveIntegerField(default=0)
    opened_at = models.DateTimeField(null=True, blank=True)
    # The provider asked everyone to wait (Retry-After): no call to this source before then.
    not_before = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["source"]
        verbose_name_plural = "source health"

    def __str__(self) -> str:
        return f"{self.source}: breaker {self.breaker_state}, budget {self.budget_tokens:.0f}"

    @property
    def budget_empty(self) -> bool:
        return self.budget_tokens < self.retry_cost


# ---------------------------------------------------------------------------------------------
# Human review


class ReviewItemQuerySet(models.QuerySet):
    def open(self) -> ReviewItemQuerySet:
        """Items still waiting for a decision (open or claimed), oldest first."""
        return self.filter(state__in=ReviewItem.PENDING).order_by("created_at", "id")

    def resolved(self) -> ReviewItemQuerySet:
        """Decided items, the latest decision first."""
        return self.filter(state=ReviewItem.State.RESOLVED).order_by("-resolved_at", "-id")

    def overdue(self, now: datetime) -> ReviewItemQuerySet:
        return self.open().filter(deadline_at__lte=now)

    def with_signature(self, signature: str) -> ReviewItemQuerySet:
        return self.open().filter(signature=signature)

    def resolvable_by(self, user: Any) -> ReviewItemQuerySet:
        """Pending items this user may decide: unclaimed, or claimed by them (never another's)."""
        return self.filter(ReviewItem.resolvable(user))

    def unapplied(self) -> ReviewItemQuerySet:
        """Resolved items whose decision the coordinator has not applied yet."""
        return self.filter(state=ReviewItem.State.RESOLVED, continued_at__isnull=True)

    def blocking(self) -> ReviewItemQuerySet:
        """Items that keep a workflow open: waiting for a human, or resolved but not applied.

        A decision committed after a step read the resolutions must not find its workflow
        already settled, so a resolved item counts until a step has applied it.
        """
        return self.filter(
            Q(state__in=ReviewItem.PENDING)
            | Q(state=ReviewItem.State.RESOLVED, continued_at__isnull=True)
        )

    def for_token(self, token: ApiToken) -> ReviewItemQuerySet:
        """Items of the runs this token reported: what its agent's coordinator waits for."""
        return self.filter(token=token)

    def undelivered(self) -> ReviewItemQuerySet:
        """Resolutions no agent has picked up yet, the earliest decision first (the feed)."""
        return self.filter(state=ReviewItem.State.RESOLVED, delivered_at__isnull=True).order_by(
            "resolved_at", "id"
        )

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
        # Labels are written out: Django's default would capitalise some ("Retry", "Switch
        # Source") and not others; every page shows them lowercase, as the decisions.
        RETRY = "retry", "retry"
        RETRY_EDITED = "retry_edited", "retry with edited input"
        SWITCH_SOURCE = "switch_source", "switch source"
        ACCEPT_PARTIAL = "accept_partial", "accept partial results"
        ABORT = "abort", "abort"

    PENDING = (State.OPEN, State.CLAIMED)

    # Indexed (Django's default), no database constraint: runs are partitioned (see Run).
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="review_items", db_constraint=False
    )
    workflow = models.ForeignKey(
        Workflow, null=True, blank=True, on_delete=models.CASCADE, related_name="review_items"
    )
    reason = models.TextField()
    failure_type = models.CharField(
        max_length=20, choices=FailureType.choices, null=True, blank=True
    )
    signature = models.CharField(
        max_length=64, blank=True, help_text="Hash of source, failure type and normalised detail"
    )
    # The queue's facets, copied from the run (and its workflow) when the item opens, so that
    # filtering and counting thousands of open items never joins the run table.
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
    # An agent-reported item's resolution goes back to the token that reported the run: it
    # picks it up once, by an ack or by a webhook its receiver answered with a 2xx.
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

    objects = ReviewItemQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        permissions = [("review", "Can claim and resolve review items and act on runs")]
        indexes = [
            # the review queue's keyset pages (open items oldest first, ties by id), its facet
            # counts (a scan of the pending rows only) and the overview's "open reviews" tile
            models.Index(
                fields=["created_at", "id"],
                name="review_pending_created",
                condition=Q(state__in=["open", "claimed"]),
            ),
            # the queue's "resolved" tab: keyset pages, the latest decision first
            models.Index(
                fields=["resolved_at", "id"],
                name="review_resolved_at",
                condition=Q(state="resolved"),
            ),
            # grouping escalations with the same signature
            models.Index(fields=["signature", "state"], name="review_signature_state"),
            # GET /api/v1/reviews?state=resolved&delivered=false: one token's resolutions not
            # picked up yet, in keyset pages (the rows leave it as they are acknowledged)
            models.Index(
                fields=["token", "resolved_at", "id"],
                name="review_undelivered",
                condition=Q(state="resolved", delivered_at__isnull=True),
            ),
            # the other lists of GET /api/v1/reviews (one token's items by id) and deleting a
            # token (the SET NULL of this key)
            models.Index(fields=["token", "id"], name="review_token_id"),
            # the beat task applying fallbacks to pending items past their deadline
            models.Index(
                fields=["deadline_at"],
                name="review_pending_deadline",
                condition=Q(state__in=["open", "claimed"]),
            ),
        ]

    def __str__(self) -> str:
        return f"review {self.pk} ({self.state}) for run {self.run_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self._state.adding:
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

    @property
    def webhook_or_none(self) -> WebhookDelivery | None:
        """The webhook delivery of this item's resolution, if its token has a callback URL."""
        try:
            return self.webhook
        except WebhookDelivery.DoesNotExist:
            return None

    def acknowledge(self, via: str, now: datetime | None = None) -> bool:
        """Mark the resolution picked up by the agent, once; True for the one caller that won
        (a repeated ack, or a webhook after an ack, changes nothing)."""
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
        """Claim an open item for `user`; True if they hold it now (a second claim by them too)."""
        now = now or timezone.now()
        changed = ReviewItem.objects.filter(pk=self.pk, state=self.State.OPEN).update(
            state=self.State.CLAIMED, assignee=user, claimed_at=now
        )
        self.refresh_from_db(fields=["state", "assignee", "claimed_at"])
        return bool(changed) or (
            self.state == self.State.CLAIMED and self.assignee_id == getattr(user, "pk", None)
        )

    def resolve(
        self,
        user: Any,
        resolution: str,
        note: str = "",
        edited_input: dict | None = None,
        failure_type: str | None = None,
        save_override: bool = False,
        apply_to_group: bool = False,
    ) -> int:
        """Resolve this item (and, if asked, every pending item with its signature that no other
        operator holds); return how many were resolved (0: another operator or the fallback was
        first).

        For an unclassified item, `failure_type` reclassifies it and `save_override` saves a
        provider override so the next such error classifies itself. Each resolution is audited and
        announced (`review_resolved`), so the coordinator applies it once after commit.
        """
        if resolution not in self.Resolution.values:
            raise ValueError(f"unknown resolution {resolution!r}")
        if failure_type is not None and failure_type not in FailureType.values:
            raise ValueError(f"unknown failure type {failure_type!r}")
        if resolution != self.Resolution.RETRY_EDITED:
            edited_input = None  # only "retry with edited input" sends an input
        with transaction.atomic():
            items = [self]
            if apply_to_group and self.signature:
                # Items another operator holds stay theirs: the group takes the rest.
                group = ReviewItem.objects.with_signature(self.signature).resolvable_by(user)
                items += list(group.exclude(pk=self.pk))
            changes = dict(
                resolution=resolution, note=note, edited_input=edited_input, resolved_by=user
            )
            # The others' conditional update re-checks the claim: one taken meanwhile is skipped.
            others = ReviewItem.resolvable(user)
            resolved = sum(
                i._resolve_once(user, changes, failure_type, guard=None if i is self else others)
                for i in items
            )
            if resolved and save_override and failure_type:
                self._save_override(user, failure_type, note)
        return resolved

    def resolve_by_fallback(self, action: str, note: str, now: datetime) -> int:
        """Resolve an item left past its deadline with its type's fallback; 1 if this won."""
        changes = {"resolution": action, "note": note, "resolved_by": None}
        return self._resolve_once("system", changes, fallback=True, now=now)

    def _resolve_once(
        self,
        actor: Any,
        changes: dict[str, Any],
        failure_type: str | None = None,
        fallback: bool = False,
        now: datetime | None = None,
        guard: Q | None = None,
    ) -> int:
        before = self.snapshot()
        fields = changes | {"state": self.State.RESOLVED, "resolved_at": now or timezone.now()}
        if failure_type and self.failure_type == FailureCategory.UNCLASSIFIED:
            fields["failure_type"] = failure_type
        if fallback:
            fields["fallback_applied"] = True
        target = ReviewItem.objects.filter(pk=self.pk, state__in=self.PENDING)
        if guard is not None:
            target = target.filter(guard)
        won = target.update(**fields)
        if not won:
            return 0
        self.refresh_from_db()
        AuditEntry.record(
            actor=actor,
            action="review.fallback" if fallback else "review.resolve",
            obj=self,
            before=before,
            after=self.snapshot(),
            note=changes.get("note", ""),
        )
        review_resolved.send(sender=ReviewItem, item=self)
        notify.announce(notify.REVIEW_RESOLVED, self.pk)  # heard by long polls at the commit
        return 1

    def _save_override(self, user: Any, failure_type: str, note: str) -> int | None:
        """Turn the item's raw error into a provider override, through the audited policy path."""
        run = self.run
        match_on, value = ProviderOverride.best_signal(
            run.provider_code, run.status_code, run.exception_type
        )
        if not value:
            return None
        override = ProviderOverride.objects.filter(
            provider=run.source, match_on=match_on, match_value=value
        ).first() or ProviderOverride(provider=run.source, match_on=match_on, match_value=value)
        override.failure_type = failure_type
        override.enabled = True
        override.note = (note or f"From review item {self.pk}")[:300]
        if override.pk is None:
            override.created_by = user if getattr(user, "is_authenticated", False) else None
        return save_policy_change(override, user, note=f"saved from review item {self.pk}")

    def snapshot(self) -> dict[str, Any]:
        """The audited form of this item."""
        return {
            "state": self.state,
            "resolution": self.resolution,
            "failure_type": self.failure_type,
            "assignee": self.assignee_id,
            "edited_input": self.edited_input,
            "fallback_applied": self.fallback_applied,
        }


# ---------------------------------------------------------------------------------------------
# The outbox


class OutboxQuerySet(models.QuerySet):
    def available(self, now: datetime) -> OutboxQuerySet:
        """Messages the sweeper may (re)send now, oldest first."""
        return self.filter(available_at__lte=now).order_by("available_at", "id")


class OutboxMessage(models.Model):
    """A Celery task to send, written in the same transaction as the change it announces.

    A row exists only until its message is sent: the relay deletes it once the broker has it, so
    the table holds only what is still to send (a broker outage delays work, it never loses it).
    `available_at` is when the sweeper may send it: a short grace after creation for messages
    the relay sends right after the commit, the due time for delayed ones, and after a failed
    send the next try.
    """

    task = models.CharField(max_length=200)
    args = models.JSONField(default=list)
    created_at = models.DateTimeField(default=timezone.now)
    available_at = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0, help_text="Sends tried by the sweeper")
    last_error = models.CharField(max_length=500, blank=True)

    objects = OutboxQuerySet.as_manager()

    class Meta:
        ordering = ["available_at", "id"]
        indexes = [
            # the sweeper's "unsent and available now" (every row is unsent)
            models.Index(fields=["available_at"], name="outbox_available"),
        ]

    def __str__(self) -> str:
        return f"{self.task}{tuple(self.args)}"


# ---------------------------------------------------------------------------------------------
# Webhook deliveries of resolutions


class WebhookDeliveryQuerySet(models.QuerySet):
    def stalled(self, now: datetime) -> WebhookDeliveryQuerySet:
        """Pending deliveries whose attempt's lease ran out with no outcome (a killed worker)."""
        return self.filter(state=WebhookDelivery.State.PENDING, lease_until__lt=now)


class WebhookDelivery(models.Model):
    """One review item's resolution on its way to its token's callback URL.

    One row per resolution (the item is unique), whatever the number of attempts: its
    `delivery_id` is sent with every attempt (`Failsight-Delivery`), so a receiver that got an
    attempt whose answer we never saw (a worker killed mid-request) dedupes the redelivery.
    """

    class State(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        FAILED = "failed", "given up"
        # The agent acknowledged the resolution over the API before a webhook got through: it has
        # it, so no further attempt is made (a second pick-up would be a duplicate).
        SUPERSEDED = "superseded", "picked up by an ack first"

    item = models.OneToOneField(ReviewItem, on_delete=models.CASCADE, related_name="webhook")
    token = models.ForeignKey(ApiToken, on_delete=models.CASCADE, related_name="deliveries")
    url = models.URLField(max_length=500)
    delivery_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)
    # The attempt in flight holds the delivery until then (its timeout and a margin); a worker
    # killed mid-request leaves it to run out, after which a redelivery may take over.
    lease_until = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=200, blank=True)
    last_error = models.CharField(max_length=500, blank=True)

    objects = WebhookDeliveryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # the sweeper's "an attempt died with its worker" safety net
            models.Index(
                fields=["lease_until"], name="webhook_pending_lease", condition=Q(state="pending")
            ),
        ]

    def __str__(self) -> str:
        return f"delivery of review {self.item_id} to {self.url} ({self.state})"

    def begin_attempt(self, owner: str, now: datetime, until: datetime, dead: str = "") -> int:
        """Take the delivery for one attempt; return its number (0: delivered, given up, or an
        attempt alive elsewhere holds it). A holder known dead (`dead`) is taken over."""
        # Nobody holds it: no lease, one run out, one the sweeper claimed for a resend (no
        # owner), this process's own, or a holder known dead.
        free = Q(lease_until__isnull=True) | Q(lease_until__lt=now) | Q(lease_owner__in=["", owner])
        if dead:
            free |= Q(lease_owner=dead)
        won = (
            WebhookDelivery.objects.filter(pk=self.pk, state=self.State.PENDING)
            .filter(free)
            .update(attempts=F("attempts") + 1, lease_until=until, lease_owner=owner)
        )
        self.refresh_from_db(fields=["attempts", "lease_until", "lease_owner", "state"])
        if not won:
            return 0
        WebhookAttempt.objects.create(delivery=self, number=self.attempts, started_at=now)
        return self.attempts

    def succeed(self, number: int, status_code: int, now: datetime) -> bool:
        """Record attempt `number`'s 2xx: the agent's ack. True unless an earlier attempt was
        already acked (the unique constraint's loser: the receiver had it already)."""
        try:
            with transaction.atomic():
                WebhookAttempt.objects.filter(delivery=self, number=number).update(
                    finished_at=now, status_code=status_code, acked=True
                )
        except IntegrityError:
            return False
        self._settle(self.State.DELIVERED, now, delivered_at=now, last_error="")
        self.item.acknowledge(Delivery.WEBHOOK, now)
        return True

    def fail(self, number: int, status_code: int | None, error: str, now: datetime) -> None:
        """Record attempt `number`'s failure (a non-2xx, a timeout, a refused connection)."""
        WebhookAttempt.objects.filter(delivery=self, number=number).update(
            finished_at=now, status_code=status_code, error=error[:500]
        )
        WebhookDelivery.objects.filter(pk=self.pk, state=self.State.PENDING).update(
            last_error=error[:500], lease_until=None, lease_owner=""
        )

    def give_up(self, now: datetime) -> None:
        self._settle(self.State.FAILED, now)

    def supersede(self, now: datetime) -> None:
        self._settle(self.State.SUPERSEDED, now)

    def _settle(self, state: str, now: datetime, **fields: Any) -> None:
        WebhookDelivery.objects.filter(pk=self.pk, state=self.State.PENDING).update(
            state=state, lease_until=None, lease_owner="", **fields
        )
        self.refresh_from_db()


class WebhookAttempt(models.Model):
    """One POST of a delivery: when, what the receiver answered, whether it counted as the ack."""

    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="tries")
    number = models.PositiveSmallIntegerField()
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    acked = models.BooleanField(default=False, help_text="Answered with a 2xx: the agent's ack")

    class Meta:
        ordering = ["delivery", "number"]
        constraints = [
            models.UniqueConstraint(fields=["delivery", "number"], name="webhook_attempt_number"),
            # Exactly once: a resolution never has two acked deliveries, whatever the races.
            models.UniqueConstraint(
                fields=["delivery"], condition=Q(acked=True), name="webhook_one_ack"
            ),
        ]

    def __str__(self) -> str:
        outcome = self.status_code or self.error or "no answer"
        return f"attempt {self.number} of {self.delivery_id}: {outcome}"


# ---------------------------------------------------------------------------------------------
# Audit trail


class AuditEntry(models.Model):
    """Who changed what, when, with the state before and after."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor_label = models.CharField(max_length=150, help_text="Username, token name or 'system'")
    action = models.CharField(max_length=50)
    object_type = models.CharField(max_length=50)
    object_id = models.CharField(max_length=50)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [
            # the policies page's change history and one object's history
            models.Index(fields=["object_type", "object_id", "created_at"], name="audit_object"),
            models.Index(fields=["created_at"], name="audit_created"),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_label} {self.action}"

    @classmethod
    def record(
        cls,
        *,
        actor: Any,
        action: str,
        obj: models.Model,
        before: dict | None,
        after: dict | None,
        note: str = "",
    ) -> AuditEntry:
        label = actor_label(actor)
        user = actor if getattr(actor, "is_authenticated", False) else None
        return cls.objects.create(
            actor=user,
            actor_label=label,
            action=action,
            object_type=obj._meta.model_name,
            object_id=str(obj.pk),
            before=before,
            after=after,
            note=note,
        )

    @classmethod
    def record_lockout(cls, username: str, address: str, failures: int) -> AuditEntry:
        """Record that sign-in was locked for `username` from `address` after `failures` tries.

        The name is whatever was typed (it may name no user), so the entry names it as text.
        """
        return cls.objects.create(
            actor=None,
            actor_label=(username or "anonymous")[:150],
            action="auth.lockout",
            object_type="user",
            object_id=(username or "")[:50],
            before=None,
            after={"address": address, "failures": failures},
            note=f"Sign-in locked after {failures} failed attempts from {address}.",
        )


def save_policy_change(obj: RoutingPolicy | ProviderOverride, actor: Any, note: str = "") -> int:
    """Save a policy or override edit with its audit row and a version bump; return the version.

    The one place every writer (admin, dashboard, review resolution) goes through, so no change
    escapes the audit trail or leaves decisions on a stale cached snapshot.
    """
    with transaction.atomic():
        before = None
        if obj.pk:
            old = type(obj).objects.select_for_update().filter(pk=obj.pk).first()
            before = old.snapshot() if old else None
        obj.full_clean()
        obj.save()
        version = PolicyState.bump()
        PolicyVersion.capture(version, actor, note)
        AuditEntry.record(
            actor=actor,
            action=f"{obj._meta.model_name}.{'update' if before else 'create'}",
            obj=obj,
            before=before,
            after=obj.snapshot() | {"version": version},
            note=note,
        )
    return version


def delete_policy_object(obj: ProviderOverride, actor: Any, note: str = "") -> int:
    with transaction.atomic():
        before = obj.snapshot()
        pk = obj.pk
        obj.delete()
        obj.pk = pk
        version = PolicyState.bump()
        PolicyVersion.capture(version, actor, note)
        AuditEntry.record(
            actor=actor,
            action=f"{obj._meta.model_name}.delete",
            obj=obj,
            before=before,
            after={"version": version},
            note=note,
        )
    return version


def restore_policy_version(number: int, actor: Any, note: str = "") -> PolicyVersion:
    """Write version `number`'s routing table and overrides back as a new version, audited.

    The restored version is a new number (N+1 equal to N), never a rewind: decisions recorded
    under the versions in between keep meaning what they meant. Raises PolicyVersion.DoesNotExist
    for a version the history does not hold.
    """
    with transaction.atomic():
        PolicyState.objects.get_or_create(pk=1)
        PolicyState.objects.select_for_update().filter(pk=1).first()  # one restore at a time
        target = PolicyVersion.objects.get(version=number)
        for row in target.policies:
            fields = {k: v for k, v in row.items() if k != "failure_type"}
            ftype = row["failure_type"]
            RoutingPolicy.objects.update_or_create(failure_type=ftype, defaults=fields)
        wanted = target.overrides_by_match()
        for override in ProviderOverride.objects.all():
            key = (override.provider, override.match_on, override.match_value)
            if key not in wanted:
                override.delete()
        for (provider, match_on, value), row in wanted.items():
            fields = {k: row[k] for k in ("failure_type", "retryable", "note", "enabled")}
            ProviderOverride.objects.update_or_create(
                provider=provider, match_on=match_on, match_value=value, defaults=fields
            )
        before = PolicyState.current_version()
        version = PolicyState.bump()
        note = note or f"restored version {number}"
        restored = PolicyVersion.capture(version, actor, note, restored_from=number)
        AuditEntry.record(
            actor=actor,
            action="policyversion.restore",
            obj=restored,
            before={"version": before},
            after={"version": version, "restored_from": number},
            note=note,
        )
    return restored
