"""Runs: one attempt of one subagent on one source, with its outcome and its routing decision."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from orchestrator.fingerprint import signature as failure_signature
from orchestrator.models import run_queries
from orchestrator.models.prices import CURRENCY, money_field
from orchestrator.models.projects import DEFAULT_PROJECT_ID
from orchestrator.models.run_queries import RunQuerySet, RunStatus
from orchestrator.models.tokens import ApiToken, default_running_timeout
from orchestrator.vocabulary import Action, FailureCategory

# The taxonomy as Django choices (labels for forms and the admin); the values are the classifier's.
FailureType = models.TextChoices(
    "FailureType", [(c.name, (c.value, c.value.replace("_", " "))) for c in FailureCategory]
)

# What Python's datetime reads back; PostgreSQL stores times beyond (and years BC).
TIME_MIN = datetime.min.replace(tzinfo=UTC)
TIME_MAX = datetime.max.replace(tzinfo=UTC)


class CostSource(models.TextChoices):
    """Where a run's cost came from; blank: it has none."""

    REPORTED = "reported", "reported by the agent"
    PRICED = "priced", "priced from the price table"


class Run(models.Model):
    """One attempt of one subagent on one source, with its structured outcome (the envelope).

    On PostgreSQL the table is partitioned by `created_at` (`orchestrator.partitions`), its primary
    key (id, created_at); a partitioned unique index would have to include `created_at`, so there
    the unique claims below live in `RunKey`, written by a trigger in the insert's statement."""

    Status = run_queries.RunStatus
    CostSource = CostSource

    FINISHED = (Status.SUCCEEDED, Status.FAILED, Status.SKIPPED, Status.ESCALATED, Status.CANCELLED)
    PENDING = run_queries.PENDING
    FAILURE = run_queries.FAILURE
    RETRYABLE_BY_OPERATOR = run_queries.RETRYABLE_BY_OPERATOR
    # The exception type of an agent's run the running deadline finished (no finish came).
    NO_FINISH_REPORTED = "NoFinishReported"

    # No foreign key is a database constraint: a partitioned table has no unique `id` to point at.
    # The API checks references before inserting (`orchestrator.ingest.pipeline.reference_errors`).
    workflow = models.ForeignKey(
        "Workflow",
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
    # The failure type as the agent wrote it, when that was an alias ("auth_error").
    reported_failure_type = models.CharField(max_length=50, null=True, blank=True)
    # The policy version whose provider overrides classified the failure: the agent's, or the
    # server's when it classified the report again (`orchestrator.ingest.reclassify`).
    classified_policy_version = models.PositiveIntegerField(null=True, blank=True)
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
    # The failure's group key (`orchestrator.fingerprint`), blank for successes.
    signature = models.CharField(max_length=32, blank=True, editable=False)

    decision = models.CharField(max_length=20, choices=Action.choices(), blank=True)
    decision_reason = models.TextField(blank=True)
    policy_version = models.PositiveIntegerField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_delay = models.FloatField(null=True, blank=True, help_text="Seconds, for a retry")
    budget_spent = models.FloatField(
        null=True, blank=True, help_text="Retry-budget tokens the decision took"
    )
    switch_to = models.CharField(max_length=100, blank=True, help_text="A switch's next source")
    decision_refresh = models.BooleanField(
        default=False, help_text="A retry after refreshing the credentials (an auth failure's one)"
    )
    due_at = models.DateTimeField(null=True, blank=True, help_text="When a queued retry may run")

    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)

    # Tokens are revoked, never deleted by the product: no index (it would cost every insert and
    # serve no page), and one deleted in the admin leaves its id on its runs (DO_NOTHING).
    token = models.ForeignKey(
        ApiToken,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        related_name="runs",
        db_index=False,
        db_constraint=False,
    )
    # `slot` names a first attempt (workflow:topic:source) so a redelivered step never fans out
    # twice; `deliveries` counts task starts to park poison tasks.
    slot = models.CharField(max_length=300, blank=True)
    # The failed run whose switch_source decision started this one ("did switching help?").
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
    # Renewed by the running delivery's heartbeat; once run out, the sweeper takes the run back.
    lease_until = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(
        max_length=200, blank=True, help_text="host:pid of the worker process holding the lease"
    )
    idempotency_key = models.CharField(max_length=255, blank=True)
    request_hash = models.CharField(
        max_length=64, blank=True, help_text="Hash of the reported body, to refuse a reused key"
    )
    # The OpenTelemetry span this run is or was reported from (lowercase hex), if any.
    trace_id = models.CharField(max_length=32, blank=True)
    span_id = models.CharField(max_length=16, blank=True)
    # How many values the secret filters replaced with [Filtered] in what was reported.
    scrubbed_fields = models.PositiveIntegerField(default=0)
    # The project of the token that reported it (of its workflow for the coordinator's runs).
    # No constraint or plain index, as for `token`: a partial index serves the other projects.
    project = models.ForeignKey(
        "Project",
        default=DEFAULT_PROJECT_ID,
        on_delete=models.DO_NOTHING,
        related_name="+",
        db_index=False,
        db_constraint=False,
    )

    # What the run consumed, as its agent or its OpenTelemetry span said (`usage`): tokens (the
    # input count includes the cached ones) and the model that answered.
    input_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    output_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    cached_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    model = models.CharField(max_length=200, blank=True)
    # What it cost: as reported, or priced from the price table (`orchestrator.pricing`); NULL
    # when neither said. Sums are per currency.
    cost = money_field(null=True, blank=True)
    cost_currency = models.CharField(max_length=3, default="USD", validators=[CURRENCY])
    cost_source = models.CharField(max_length=10, choices=CostSource.choices, blank=True)
    # The columns above, in the order the ingest path, the export and pricing write them.
    USAGE_FIELDS = (
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "model",
        "cost",
        "cost_currency",
        "cost_source",
    )

    objects = RunQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # The unique claims (`RunKey` on PostgreSQL): a retried report never duplicates a run,
            models.UniqueConstraint(
                fields=["token", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="run_idempotency_key_per_token",
            ),
            # a redelivered coordinator step never creates a second first attempt of a slot...
            models.UniqueConstraint(fields=["slot"], condition=~Q(slot=""), name="run_unique_slot"),
            # ...nor a second row for the same retry (NULL retry_of rows are first attempts).
            models.UniqueConstraint(
                fields=["retry_of", "attempt"],
                condition=Q(retry_of__isnull=False),
                name="run_unique_retry_attempt",
            ),
            # A time Python cannot read back would break every page showing the run.
            *(
                models.CheckConstraint(
                    condition=Q(**{f"{name}__isnull": True})
                    | Q(**{f"{name}__gte": TIME_MIN, f"{name}__lte": TIME_MAX}),
                    name=f"run_{name}_readable",
                )
                for name in ("started_at", "finished_at")
            ),
        ]
        # Write costs: docs/run-indexes.md. Partial wherever most runs have nothing to find.
        indexes = [
            # runs list (newest first, keyset on created_at, id) and time-window counts
            models.Index(fields=["created_at", "id"], name="run_created_id"),
            # runs by status other than succeeded (most runs: run_created_id), the sweeper's pending
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
            # runs filtered by source / agent, and the skip scan behind the filter's suggestions
            models.Index(fields=["source", "created_at"], name="run_source_created"),
            models.Index(fields=["agent", "created_at"], name="run_agent_created"),
            # a workflow's runs (its page, its coverage, its step) and deleting a workflow
            models.Index(
                fields=["workflow", "created_at"],
                name="run_workflow_created",
                condition=Q(workflow__isnull=False),
            ),
            # the attempts of a task (`attempts_of`), and deleting a first attempt (SET NULL)
            models.Index(
                fields=["retry_of", "attempt"],
                name="run_retry_of_attempt",
                condition=Q(retry_of__isnull=False),
            ),
            # the runs of one trace, newest first (GET /runs?trace_id=, the trace filter)
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
            # a failure group's runs, newest first, and the runs list's `group` filter
            models.Index(
                fields=["signature", "created_at"],
                name="run_signature_created",
                condition=~Q(signature=""),
            ),
            # "did the switch recover it?" (the failure groups' fold) and deleting a run (SET NULL)
            models.Index(
                fields=["switched_from"],
                name="run_switched_from",
                condition=Q(switched_from__isnull=False),
            ),
            # the credentials refreshed in a window (the overview's tile): the few auth failures
            models.Index(
                fields=["created_at"], name="run_refreshed", condition=Q(decision_refresh=True)
            ),
            # the total of values filtered as secrets (/metrics): the few runs that held any
            models.Index(
                fields=["created_at"],
                include=["scrubbed_fields"],
                name="run_scrubbed",
                condition=Q(scrubbed_fields__gt=0),
            ),
            # a project's runs, newest first: partial, so the default project's inserts (most
            # runs of most deployments) never write it; its lists read run_created_id
            models.Index(
                fields=["project", "created_at", "id"],
                name="run_project_created",
                condition=~Q(project=DEFAULT_PROJECT_ID),
            ),
            # a token's own runs, newest first (its runs list and export without read:all:
            # scopes.visible_parts); the built-in coordinator's runs have no token
            models.Index(
                fields=["token", "created_at", "id"],
                name="run_token_created",
                condition=Q(token__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"run {self.pk} {self.agent}@{self.source} {self.status}"

    @property
    def priced_at(self) -> datetime:
        """The time whose prices apply to this run: its start, else its creation."""
        return self.started_at or self.created_at

    @property
    def is_valid_empty(self) -> bool:
        return self.status == self.Status.SUCCEEDED and self.result_count == 0

    @property
    def is_pending(self) -> bool:
        return self.status in self.PENDING

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
        """Take this running run's lease for one delivery; return its number (None: held). A
        lease held by `owner` already (a retried task) or by `take_from` (known dead) is free."""
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
        """The columns an envelope sets on this finished run, its status included
        (`outcome_columns`); a call with no start of its own lasted no time, one whose envelope
        names no attempt keeps the attempt the run was started with."""
        fields = outcome_columns(envelope, self.source, self.started_at or finished_at, finished_at)
        fields["attempted"] = fields["attempted"] or self.attempted
        fields["calls"] = envelope.get("calls", self.calls)
        return fields

    def record_outcome(
        self,
        envelope: dict[str, Any],
        finished_at: datetime,
        calls: int,
        delivery: int | None = None,
        usage: dict[str, Any] | None = None,
    ) -> bool:
        """Store a subagent's envelope on this running run once, with `usage`'s columns (what it
        used and what its calls cost, as `orchestrator.pricing.usage_fields` prices them); False
        if recorded or taken over."""
        fields = self.outcome_fields(envelope | {"calls": calls}, finished_at) | (usage or {})
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
        refresh: bool = False,
        now: datetime | None = None,
    ) -> bool:
        """Write the routing decision on this finished run, once; False if it already had one.
        `refresh`: the retry goes after refreshing the credentials."""
        fields = {
            "decision": action,
            "decision_reason": reason,
            "policy_version": policy_version,
            "decided_at": now or timezone.now(),
            "decision_delay": delay,
            "budget_spent": budget_spent,
            "switch_to": switch_to or "",
            "decision_refresh": refresh and action == Action.RETRY,
        }
        changed = Run.objects.filter(pk=self.pk, decision="").update(**fields)
        if changed:
            for name, value in fields.items():
                setattr(self, name, value)
        return bool(changed)

    def stored_decision(self) -> dict[str, Any]:
        """The recorded decision in the shape `POST /decisions` answers with."""
        return {
            "action": self.decision,
            "delay_seconds": self.decision_delay or 0.0,
            "reason": self.decision_reason,
            "policy_version": self.policy_version or 1,
            "refresh": self.decision_refresh and self.decision == Action.RETRY,
            "switch_to": self.switch_to or None,
            "budget_spent": self.budget_spent or 0.0,
            "decided_at": self.decided_at,
        }

    @property
    def is_reported(self) -> bool:
        return self.token_id is not None

    def finish_reported(
        self, envelope: dict[str, Any], finished_at: datetime, **extra: Any
    ) -> bool:
        """Finish an agent's running run with its envelope, once; False if it had finished."""
        fields = self.outcome_fields(envelope, finished_at) | extra
        fields.pop("calls")
        return self.transition(self.Status.RUNNING, fields.pop("status"), **fields)

    def running_timeout(self) -> timedelta:
        """How long this agent's run may stay `running`: its token's timeout, or the default."""
        try:
            token = self.token  # loaded with the run where many are shown (select_related)
        except ObjectDoesNotExist:
            token = None
        return token.effective_running_timeout if token else default_running_timeout()

    @property
    def running_deadline(self) -> datetime | None:
        """When the sweeper finishes this agent's running run as a timeout (None: not one)."""
        if self.status != self.Status.RUNNING or not self.is_reported:
            return None
        return self.created_at + self.running_timeout()

    def finish_by_deadline(self, now: datetime) -> bool:
        """Finish this agent's running run as a timeout, through the same finish as its agent's
        PATCH; False if a finish came first (or another sweeper did it)."""
        timeout = self.running_timeout()
        minutes = timeout.total_seconds() / 60
        span = f"{minutes:g} min" if minutes >= 1 else f"{timeout.total_seconds():g} s"
        envelope = {
            "status": "error",
            "failure_type": FailureCategory.TIMEOUT,
            "exception_type": self.NO_FINISH_REPORTED,
            "detail": f"Timed out: no finish reported within {span} of being reported running "
            "(the running deadline); the sweeper finished it. Its agent may be gone.",
        }
        started = self.started_at or self.created_at
        duration = max(0.0, (now - started).total_seconds() * 1000)
        return self.finish_reported(envelope, now, duration_ms=duration)

    @property
    def finished_by_deadline(self) -> bool:
        return self.status == self.Status.FAILED and self.exception_type == self.NO_FINISH_REPORTED

    def same_outcome(self, envelope: dict[str, Any]) -> bool:
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

# An envelope's status as a run's ("running": reported started, finished later with an outcome).
ENVELOPE_RUN_STATUS = {
    "ok": RunStatus.SUCCEEDED,
    "error": RunStatus.FAILED,
    "running": RunStatus.RUNNING,
}


def outcome_columns(
    envelope: Mapping[str, Any],
    source: str | None,
    started_at: datetime | None,
    finished_at: datetime | None,
) -> dict[str, Any]:
    """The run columns an envelope (`classifier.envelope`'s fields, by name) sets: the one mapping
    from an outcome to a run, for an agent's report, its finish and the built-in coordinator's
    runs alike. Fields are stored as the envelope says them, except that a failure without a
    failure type is unclassified, only a failure has a failure type (and a signature), only a
    success has results; the duration is the reported one, else the time between start and
    finish (never negative), else unknown."""
    status = ENVELOPE_RUN_STATUS.get(envelope.get("status"), RunStatus.FAILED).value
    failed = status == RunStatus.FAILED
    ok = status == RunStatus.SUCCEEDED
    results = list(envelope.get("results") or []) if ok else []
    partial = list(envelope.get("partial_results") or [])
    failure_type = (
        (envelope.get("failure_type") or FailureCategory.UNCLASSIFIED.value) if failed else None
    )
    detail = envelope.get("detail") or ""
    duration = envelope.get("duration_ms")
    if duration is None and started_at is not None and finished_at is not None:
        duration = max(0.0, (finished_at - started_at).total_seconds() * 1000)
    return {
        "status": status,
        "results": results,
        "result_count": len(results),
        "failure_type": failure_type,
        "signature": failure_signature(source or "", failure_type, detail) if failed else "",
        "retryable": envelope.get("retryable"),
        "retry_after": envelope.get("retry_after"),
        "signal": envelope.get("signal") or "",
        "status_code": envelope.get("status_code"),
        "provider_code": envelope.get("provider_code") or "",
        "exception_type": envelope.get("exception_type") or "",
        "detail": detail,
        "exception_chain": list(envelope.get("chain") or []),
        "partial_results": partial,
        "partial_count": len(partial),
        "alternatives": list(envelope.get("alternatives") or []),
        "attempted": envelope.get("attempted") or {},
        "finished_at": finished_at,
        "duration_ms": duration,
    }
