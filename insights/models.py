"""Run rollups and running totals for the tiles and /metrics, failure groups, alert rules. Counts
are folded in batches or appended as deltas, never updated per run (a shared counter row would
serialise every report). The tables keep the names they had in the pages' app (`dashboard_*`)."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from orchestrator.models import DEFAULT_PROJECT_ID, FailureType, Project
from orchestrator.models.tokens import new_signing_secret


class RollupCounts(models.Model):
    """Counts of runs per status and failure type, one column per named set of `RunSets` (retries
    with a failure status are the wasted ones); the time span and other keys are the subclass's."""

    status = models.CharField(max_length=12)
    failure_type = models.CharField(max_length=20, blank=True, help_text="Blank: no failure")
    count = models.PositiveIntegerField(default=0)
    partial_runs = models.PositiveIntegerField(default=0)
    partial_items = models.PositiveBigIntegerField(default=0)
    empty_runs = models.PositiveIntegerField(default=0)
    retries = models.PositiveIntegerField(default=0)
    early_retries = models.PositiveIntegerField(default=0)
    switched = models.PositiveIntegerField(default=0)
    avoided_retries = models.PositiveIntegerField(default=0)
    futile_retries = models.PositiveIntegerField(default=0)

    class Meta:
        abstract = True


class RunRollup(RollupCounts):
    """Counts of the runs created in one hour, per status, failure type and source."""

    hour = models.DateTimeField(help_text="Start of the hour (UTC) the runs were created in")
    source = models.CharField(max_length=100)

    class Meta:
        db_table = "dashboard_runrollup"
        constraints = [
            models.UniqueConstraint(
                fields=["hour", "status", "failure_type", "source"], name="rollup_unique_key"
            )
        ]
        # The unique constraint's index (hour first) serves every window query of the tiles.

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.status} {self.failure_type} {self.source}"


class SixHours(models.Model):
    """Six consecutive complete hours of hourly rollups summed, kept for every hour as a start: the
    7-day tiles' six-hour buckets end with the current hour, so one can start at any hour. The
    blocks of one `phase` (every sixth start) never overlap."""

    start = models.DateTimeField(help_text="Start of the first of the six hours (UTC)")
    phase = models.PositiveSmallIntegerField(
        help_text="The start hour modulo 6 (UTC): the blocks of one phase tile the time line"
    )

    class Meta:
        abstract = True


class SixHourRollup(SixHours, RollupCounts):
    """Counts of the runs created in six hours from `start`, per status and failure type."""

    class Meta:
        db_table = "dashboard_sixhourrollup"
        constraints = [
            models.UniqueConstraint(
                fields=["start", "status", "failure_type"], name="six_hour_rollup_key"
            )
        ]
        indexes = [
            # The overview's 24 h and 7 d tiles: a window's whole blocks are one phase over a
            # range of starts (the unique key's index serves the refresh, by start).
            models.Index(fields=["phase", "start"], name="six_hour_rollup_phase"),
        ]

    def __str__(self) -> str:
        return f"{self.start:%Y-%m-%d %H}h+6h {self.status} {self.failure_type}"


class SixHourWastedRetries(SixHours):
    """Wasted retries (retries that failed or were escalated) in six hours from `start`, per
    failure type and source: the one figure the tiles split by source."""

    failure_type = models.CharField(max_length=20, blank=True)
    source = models.CharField(max_length=100)
    retries = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "dashboard_sixhourwastedretries"
        verbose_name_plural = "six-hour wasted retries"
        constraints = [
            models.UniqueConstraint(
                fields=["start", "failure_type", "source"], name="six_hour_wasted_key"
            )
        ]
        indexes = [
            # The overview's wasted-retries tile, like SixHourRollup's.
            models.Index(fields=["phase", "start"], name="six_hour_wasted_phase"),
        ]

    def __str__(self) -> str:
        return f"{self.start:%Y-%m-%d %H}h+6h {self.failure_type} {self.source}: {self.retries}"


class SignedCounts(models.Model):
    """The rollup metrics as signed numbers: a delta takes runs away from a key they leave."""

    status = models.CharField(max_length=12)
    failure_type = models.CharField(max_length=20, blank=True, help_text="Blank: no failure")
    count = models.BigIntegerField(default=0)
    partial_runs = models.BigIntegerField(default=0)
    partial_items = models.BigIntegerField(default=0)
    empty_runs = models.BigIntegerField(default=0)
    retries = models.BigIntegerField(default=0)
    early_retries = models.BigIntegerField(default=0)
    switched = models.BigIntegerField(default=0)
    avoided_retries = models.BigIntegerField(default=0)
    futile_retries = models.BigIntegerField(default=0)

    class Meta:
        abstract = True


class RunDelta(SignedCounts):
    """The change of one minute's counts made by one statement on the run table, appended by its
    triggers (`insights.minutes`) and folded every few seconds. PostgreSQL only."""

    minute = models.DateTimeField(help_text="Start of the minute (UTC) the runs were created in")
    source = models.CharField(max_length=100)

    class Meta:
        db_table = "dashboard_rundelta"
        indexes = [
            # the current hour's and the last hour's readers add the pending deltas from a minute
            models.Index(fields=["minute"], name="rundelta_minute"),
        ]

    def __str__(self) -> str:
        return (
            f"{self.minute:%H:%M} {self.status} {self.failure_type} {self.source}: {self.count:+}"
        )


class MinuteRollup(SignedCounts):
    """Counts of the runs created in one minute, per status, failure type and source."""

    minute = models.DateTimeField(help_text="Start of the minute (UTC) the runs were created in")
    source = models.CharField(max_length=100)

    class Meta:
        db_table = "dashboard_minuterollup"
        constraints = [
            # its index (minute first) serves the readers' minute ranges and the fold's upsert
            models.UniqueConstraint(
                fields=["minute", "status", "failure_type", "source"], name="minute_rollup_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.status} {self.failure_type} {self.source}"


class RunTotal(SignedCounts):
    """Running totals of every run ever stored, per key: /metrics' counters, moved by each fold."""

    source = models.CharField(max_length=100)

    class Meta:
        db_table = "dashboard_runtotal"
        constraints = [
            models.UniqueConstraint(
                fields=["status", "failure_type", "source"], name="run_total_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.status} {self.failure_type} {self.source}: {self.count}"


class RollupVersion(models.Model):
    """One row whose version each fold bumps: the overview's cached tiles are keyed by it."""

    version = models.BigIntegerField(default=0)

    class Meta:
        db_table = "dashboard_rollupversion"

    def __str__(self) -> str:
        return f"rollup version {self.version}"

    @classmethod
    def bump(cls) -> None:
        """A new version: the tiles cached under the previous one are not read again."""
        if not cls.objects.filter(pk=1).update(version=models.F("version") + 1):
            cls.objects.get_or_create(pk=1, defaults={"version": 1})

    @classmethod
    def current(cls) -> int:
        return cls.objects.filter(pk=1).values_list("version", flat=True).first() or 0


class ObservationHour(models.Model):
    """What /metrics' histograms and event counters count in one hour of the events, per family,
    labels and bucket, with the observed values' sum (`insights.observations`). Hours before the
    kept ones are merged into one row per key whose hour is empty; those rows only ever grow."""

    hour = models.DateTimeField(
        null=True, blank=True, help_text="Start of the hour (UTC) the events happened in"
    )
    family = models.CharField(max_length=60)
    agent = models.CharField(max_length=100, blank=True)
    source = models.CharField(max_length=100, blank=True)
    failure_type = models.CharField(max_length=20, blank=True)
    action = models.CharField(max_length=20, blank=True)
    event = models.CharField(max_length=30, blank=True)
    # The project's slug, for the families of runs and review items (blank for the others).
    project = models.CharField(max_length=50, blank=True)
    bucket = models.PositiveSmallIntegerField(
        default=0, help_text="Index of the family's first bound the values are at most"
    )
    count = models.BigIntegerField(default=0)
    total = models.FloatField(default=0.0, help_text="Sum of the observed values")

    class Meta:
        indexes = [
            # the fold's delete of the hours it recomputes and its merge of the older ones
            models.Index(fields=["hour"], name="observation_hour"),
        ]

    def __str__(self) -> str:
        hour = f"{self.hour:%Y-%m-%d %H}h" if self.hour else "before"
        return f"{hour} {self.family}[{self.bucket}]: {self.count}"


class ObservationFold(models.Model):
    """One row: when the observations were last folded (the next fold starts its lookback there)."""

    through = models.DateTimeField()

    def __str__(self) -> str:
        return f"observations folded through {self.through:%Y-%m-%d %H:%M:%S}"


class AlertRule(models.Model):
    """A threshold that, once crossed, posts a signed JSON webhook (re-armed after a cool-down)."""

    class Kind(models.TextChoices):
        FAILURE_RATE = "failure_rate", "failure rate of a type over a window"
        REVIEW_AGE = "review_age", "age of the oldest open review item"
        # Fires when an SLO burns at `threshold` in both `window_minutes` and a twelfth of it.
        SLO_BURN = "slo_burn", "SLO error-budget burn rate over a long and a short window"
        # Fires when a source or an agent has spent `threshold` times its daily limit (1: reached).
        SPEND_BUDGET = "spend_budget", "spend over a source's or an agent's daily budget"

    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    failure_type = models.CharField(
        max_length=20, choices=FailureType.choices, blank=True, help_text="For failure_rate"
    )
    window_minutes = models.PositiveIntegerField(default=60, validators=[MinValueValidator(1)])
    threshold = models.FloatField(
        validators=[MinValueValidator(0)],
        help_text="failure_rate: a share between 0 and 1; review_age: seconds; slo_burn: a burn "
        "rate (14.4 fast, 6 slow); spend_budget: a share of the daily limit (1: reached)",
    )
    url = models.URLField(max_length=500)
    enabled = models.BooleanField(default=True)
    cooldown_minutes = models.PositiveIntegerField(default=60)
    last_fired_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Encrypted: shown once when issued, kept only to sign this rule's webhooks with.
    sealed_signing_secret = models.TextField(blank=True, editable=False)
    # The project whose runs and review items the rule watches.
    project = models.ForeignKey(
        Project, default=DEFAULT_PROJECT_ID, on_delete=models.PROTECT, related_name="alert_rules"
    )

    class Meta:
        db_table = "dashboard_alertrule"
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind} ≥ {self.threshold})"

    def issue_signing_secret(self) -> str:
        """Sign this rule's webhooks with a new secret from now on; return it (shown once)."""
        secret, self.sealed_signing_secret = new_signing_secret()
        self.save(update_fields=["sealed_signing_secret"])
        return secret


class AlertDelivery(models.Model):
    """One firing of a rule; its state and attempts are its webhook's."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="deliveries")
    webhook = models.OneToOneField(
        "orchestrator.WebhookDelivery", on_delete=models.CASCADE, related_name="alert"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "dashboard_alertdelivery"
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "alert deliveries"

    def __str__(self) -> str:
        return f"alert {self.rule_id} at {self.created_at:%Y-%m-%d %H:%M}"


# Failure groups


class GroupCounts(models.Model):
    """What happened to one group's failures (in one hour, or ever): routing applied, endings."""

    count = models.PositiveIntegerField(default=0)
    # failures that were retries, kept partial results, or were futile retries (`RunSets`)
    wasted = models.PositiveIntegerField(default=0)
    partial = models.PositiveIntegerField(default=0)
    futile = models.PositiveIntegerField(default=0)
    # the decision routing (or an operator) took on each failure
    decided_retry = models.PositiveIntegerField(default=0)
    decided_switch = models.PositiveIntegerField(default=0)
    decided_partial = models.PositiveIntegerField(default=0)
    decided_escalate = models.PositiveIntegerField(default=0)
    decided_abort = models.PositiveIntegerField(default=0)
    # how each failure's task ended (see `insights.groups.Ending`)
    recovered_retry = models.PositiveIntegerField(default=0)
    recovered_switch = models.PositiveIntegerField(default=0)
    ended_escalated = models.PositiveIntegerField(default=0)
    ended_lost = models.PositiveIntegerField(default=0)
    ended_open = models.PositiveIntegerField(default=0)

    COUNTS = (
        "count",
        "wasted",
        "partial",
        "futile",
        "decided_retry",
        "decided_switch",
        "decided_partial",
        "decided_escalate",
        "decided_abort",
        "recovered_retry",
        "recovered_switch",
        "ended_escalated",
        "ended_lost",
        "ended_open",
    )

    class Meta:
        abstract = True


class FailureGroup(GroupCounts):
    """Failures with one signature (source, failure type and normalised detail), as an error
    tracker groups events; a resolved group that happens again is reopened as a regression."""

    class State(models.TextChoices):
        OPEN = "open", "open"
        MUTED = "muted", "muted"
        RESOLVED = "resolved", "resolved"

    signature = models.CharField(max_length=64, unique=True)
    source = models.CharField(max_length=100)
    failure_type = models.CharField(max_length=20, choices=FailureType.choices)
    pattern = models.CharField(max_length=500, blank=True, help_text="The normalised detail")
    example = models.TextField(blank=True, help_text="The detail of the first failure seen")
    example_run = models.ForeignKey(
        "orchestrator.Run",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,  # a small table: the SET NULL on a run's deletion scans it cheaply
        db_constraint=False,  # runs are partitioned: nothing can name a unique run id
    )
    first_seen = models.DateTimeField()
    last_seen = models.DateTimeField()
    # Distinct agents and workflow ids, at most MAX_LISTED each (`*_capped`: there were more).
    agents = models.JSONField(default=list, blank=True)
    agents_capped = models.BooleanField(default=False)
    workflows = models.JSONField(default=list, blank=True)
    workflows_capped = models.BooleanField(default=False)
    state = models.CharField(max_length=10, choices=State.choices, default=State.OPEN)
    state_changed_at = models.DateTimeField(null=True, blank=True)
    state_changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    regressed_at = models.DateTimeField(
        null=True, blank=True, help_text="When it came back after being resolved"
    )

    MAX_LISTED = 50

    class Meta:
        db_table = "dashboard_failuregroup"
        ordering = ["-last_seen", "-id"]
        indexes = [
            # the groups page: most recently seen first, keyset pages on (last_seen, id)
            models.Index(fields=["last_seen", "id"], name="failuregroup_last_seen"),
        ]

    def __str__(self) -> str:
        return f"{self.source} {self.failure_type}: {self.pattern[:60]}"

    @property
    def is_regression(self) -> bool:
        return self.regressed_at is not None and self.state == self.State.OPEN


class FailureGroupHour(GroupCounts):
    """One group's failures created in one hour: the sparklines, the counts of a window, and
    the rows the fold recomputes (the last few hours, as runs change after they are created)."""

    group = models.ForeignKey(FailureGroup, on_delete=models.CASCADE, related_name="hours")
    hour = models.DateTimeField(help_text="Start of the hour (UTC) the failures were created in")
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()

    class Meta:
        db_table = "dashboard_failuregrouphour"
        constraints = [
            # one row per group and hour; its index serves a group's sparkline and totals
            models.UniqueConstraint(fields=["group", "hour"], name="failuregrouphour_key")
        ]
        indexes = [
            # the groups page's counts over a window (every group's hours from a start) and the
            # fold's "recompute the hours from here on"
            models.Index(fields=["hour"], name="failuregrouphour_hour"),
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h group {self.group_id}: {self.count}"
