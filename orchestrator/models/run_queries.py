"""The named sets of runs and the queries over many runs. Each set is one Q condition in `RunSets`
(so the rollups can count it inside one GROUP BY), read through `RunQuerySet`'s methods."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.db.models import (
    DateTimeField,
    ExpressionWrapper,
    F,
    Min,
    OuterRef,
    Q,
    Subquery,
    Value,
)
from django.db.models.functions import Coalesce

from orchestrator import keyset
from orchestrator.models.tokens import ApiToken
from orchestrator.vocabulary import Action, FailureCategory

if TYPE_CHECKING:
    from orchestrator.models.runs import Run

# What follows a row (a workflow's runs, a later attempt) is created after it: saying so, with a
# margin for the clocks of different processes, lets PostgreSQL skip every older run partition.
CREATED_AFTER_MARGIN = timedelta(hours=1)


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    ESCALATED = "escalated"
    CANCELLED = "cancelled"


PENDING = (RunStatus.QUEUED, RunStatus.RUNNING)
FAILURE = (RunStatus.FAILED, RunStatus.ESCALATED)
RETRYABLE_BY_OPERATOR = (RunStatus.FAILED, RunStatus.ESCALATED, RunStatus.CANCELLED)


class RunSets:
    """The named sets of runs as Q conditions (docs/operations.md's "The pages" defines them too).
    An *avoided* retry is a failure a blind policy would have retried; a *futile* one said a retry
    cannot help and was retried anyway (an auth failure retried after a refresh is not futile)."""

    FAILURES = Q(status__in=FAILURE)
    VALID_EMPTY = Q(status=RunStatus.SUCCEEDED, result_count=0)
    PARTIAL = FAILURES & Q(partial_count__gt=0)
    RETRIES = Q(retry_of__isnull=False)
    WASTED_RETRIES = RETRIES & FAILURES
    # Started before it was due: a retry before its own due time, or an agent's call (whatever
    # its query) inside its source's Retry-After hold, whose end its report got as `due_at`.
    EARLY_RETRIES = Q(started_at__lt=F("due_at")) & (RETRIES | Q(token__isnull=False))
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
    # Failures retried after refreshing their credentials (`Run.decision_refresh`).
    REFRESHED = Q(decision_refresh=True)
    RETRYING = Q(status=RunStatus.QUEUED, retry_of__isnull=False, due_at__isnull=False)


# The envelope's two words for a run's outcome, as filters over run statuses.
ENVELOPE_STATUSES = {"ok": (RunStatus.SUCCEEDED,), "error": FAILURE}

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


class RunQuerySet(models.QuerySet):
    def since(self, t: datetime) -> RunQuerySet:
        return self.filter(created_at__gte=t)

    def failed(self) -> RunQuerySet:
        return self.filter(status=RunStatus.FAILED)

    def failed_since(self, t: datetime) -> RunQuerySet:
        return self.failed().since(t)

    def succeeded(self) -> RunQuerySet:
        return self.filter(status=RunStatus.SUCCEEDED)

    def failures(self) -> RunQuerySet:
        return self.filter(RunSets.FAILURES)

    def valid_empty(self) -> RunQuerySet:
        return self.filter(RunSets.VALID_EMPTY)

    def with_partial_results(self) -> RunQuerySet:
        return self.filter(RunSets.PARTIAL)

    def retries(self) -> RunQuerySet:
        return self.filter(RunSets.RETRIES)

    def wasted_retries(self) -> RunQuerySet:
        return self.filter(RunSets.WASTED_RETRIES)

    def early_retries(self) -> RunQuerySet:
        return self.filter(RunSets.EARLY_RETRIES)

    def switched(self) -> RunQuerySet:
        return self.filter(RunSets.SWITCHED)

    def avoided_retries(self) -> RunQuerySet:
        return self.filter(RunSets.AVOIDED_RETRIES)

    def futile_retries(self) -> RunQuerySet:
        return self.filter(RunSets.FUTILE_RETRIES)

    def refreshed(self) -> RunQuerySet:
        return self.filter(RunSets.REFRESHED)

    def retrying(self) -> RunQuerySet:
        """Queued retries waiting for their due time."""
        return self.filter(RunSets.RETRYING)

    def pending(self) -> RunQuerySet:
        return self.filter(status__in=PENDING)

    def in_flight(self) -> RunQuerySet:
        """Runs started and not finished (a reported `running` run, or a worker's)."""
        return self.filter(status=RunStatus.RUNNING)

    def retryable_by_operator(self) -> RunQuerySet:
        """Finished runs without success, which an operator may retry."""
        return self.filter(status__in=RETRYABLE_BY_OPERATOR)

    def claim_due(self, now: datetime) -> int:
        """Claim the due queued runs among these (queued → running); return how many were won."""
        return self.filter(status=RunStatus.QUEUED, due_at__lte=now).update(
            status=RunStatus.RUNNING, dispatched_at=now, lease_until=None, lease_owner=""
        )

    def reported(self) -> RunQuerySet:
        """Runs an agent reported over the API (a token), whatever coordinates them."""
        return self.filter(token__isnull=False)

    def coordinated(self) -> RunQuerySet:
        """Runs the built-in coordinator created and sends to its workers (no token)."""
        return self.filter(token__isnull=True)

    def lost_dispatches(self, before: datetime) -> RunQuerySet:
        """The coordinator's runs sent before `before` whose task never took their lease (a lost
        message); an agent's `running` run is never sent to a worker: its agent finishes it."""
        return self.coordinated().filter(
            status=RunStatus.RUNNING, lease_until__isnull=True, dispatched_at__lt=before
        )

    def lease_expired(self, now: datetime) -> RunQuerySet:
        """The coordinator's started runs whose lease ran out: their worker died mid-call."""
        return self.coordinated().filter(status=RunStatus.RUNNING, lease_until__lt=now)

    def past_running_deadline(self, now: datetime) -> RunQuerySet:
        """Agents' runs reported `running` longer ago than their token's running timeout (or
        RUN_RUNNING_TIMEOUT): no finish came, the sweeper finishes them as timeouts."""
        own = ApiToken.objects.filter(pk=OuterRef("token_id")).order_by()
        default = timedelta(seconds=settings.RUN_RUNNING_TIMEOUT)
        timeout = Coalesce(Subquery(own.values("running_timeout")), Value(default))
        cutoff = ExpressionWrapper(Value(now) - timeout, output_field=DateTimeField())
        # No run is due before the shortest timeout: the (status, created_at) index stops there.
        overrides = ApiToken.objects.aggregate(shortest=Min("running_timeout"))["shortest"]
        shortest = min(default, overrides or default)
        running = self.reported().filter(status=RunStatus.RUNNING, created_at__lt=now - shortest)
        return running.filter(created_at__lt=cutoff)

    def take_back(self, now: datetime) -> int:
        """Free the expired leases among these for a new delivery at `now`; return how many."""
        return self.lease_expired(now).update(lease_until=None, lease_owner="", dispatched_at=now)

    def by_failure_type(self) -> dict[str, int]:
        rows = (
            self.exclude(failure_type__isnull=True)
            .values_list("failure_type")
            .annotate(n=models.Count("id"))
            .order_by()
        )
        return dict(rows)

    def due(self, now: datetime) -> RunQuerySet:
        """Queued retries whose due time has come (the sweeper enqueues them)."""
        return self.filter(status=RunStatus.QUEUED, due_at__lte=now)

    def attempts_of(self, run: Run) -> RunQuerySet:
        """Every attempt of the same task as `run`, first to last."""
        root = run.retry_of_id or run.pk
        return self.filter(Q(pk=root) | Q(retry_of_id=root)).order_by("attempt", "id")

    def settled_tasks(self, roots: set[int]) -> set[int]:
        """The tasks among `roots` (first attempts' ids) that a retry by hand cannot help: one of
        their attempts, or a run a switch started in place of one, succeeded or is pending."""
        if not roots:
            return set()
        live = (RunStatus.SUCCEEDED, *PENDING)
        rows = self.filter(Q(pk__in=roots) | Q(retry_of_id__in=roots)).values_list(
            "pk", "retry_of_id", "status"
        )
        root_of = {pk: first or pk for pk, first, _ in rows}
        settled = {root_of[pk] for pk, _, status in rows if status in live}
        replaced = self.filter(switched_from_id__in=list(root_of), status__in=live)
        return settled | {root_of[pk] for pk in replaced.values_list("switched_from_id", flat=True)}

    def replacement_of(self, run: Run) -> Run | None:
        """The run a switch started in place of `run`, if any."""
        return self.filter(switched_from_id=run.pk).order_by("created_at", "id").first()

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
        """The runs list's filters (API and dashboard); None means "any", `until` is exclusive, and
        `status` also takes the envelope's "ok" and "error"."""
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
            qs = qs.exclude(status=RunStatus.SUCCEEDED, result_count=0)
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
        """Return up to `limit` runs newest first after the key `after`, and the next page's key
        (the id breaks ties, so equal timestamps neither repeat nor skip a run)."""
        return keyset_page_of([self], limit, after)


def run_key(run: Run) -> tuple[datetime, int]:
    return run.created_at, run.pk


def keyset_page_of(
    parts: Sequence[RunQuerySet], limit: int, after: tuple[datetime, int] | None = None
) -> tuple[list[Run], tuple[datetime, int] | None]:
    """`keyset_page` of the union of `parts` (`scopes.visible_parts`): a page of each, merged."""
    pages = []
    for part in parts:
        qs = part.newest_first()
        if after is not None:
            qs = qs.older_than(*after)
        pages.append(list(qs[: limit + 1]))
    rows = pages[0] if len(pages) == 1 else keyset.merged(pages, limit + 1, run_key)
    if len(rows) <= limit:
        return rows, None
    return rows[:limit], run_key(rows[limit - 1])
