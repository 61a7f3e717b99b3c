"""The routing policy: its version and history, the routing table, provider overrides, the rules
that filter secrets out of reports, each source's retry budget and circuit breaker.
`orchestrator.coordination.policy_changes` changes them."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models, transaction
from django.db.models import F
from django.utils import timezone

from classifier.scrub import ScrubRules, fold
from orchestrator.memo import LocalMemo
from orchestrator.models.audit import actor_label
from orchestrator.models.prices import Price
from orchestrator.models.runs import FailureType
from orchestrator.patterns import operator_pattern_error
from orchestrator.vocabulary import Action, Breaker, Jitter

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
        """`current_version` as API answers announce it, remembered per process a few seconds."""
        return _POLICY_VERSION.get(None, cls.current_version)

    @classmethod
    def bump(cls) -> int:
        """Bump the version inside the caller's transaction; return it."""
        _POLICY_VERSION.forget()
        transaction.on_commit(_POLICY_VERSION.forget)
        cls.objects.get_or_create(pk=1)
        cls.objects.filter(pk=1).update(version=F("version") + 1, changed_at=timezone.now())
        return cls.current_version()


class PolicyVersionQuerySet(models.QuerySet):
    def newest_first(self) -> PolicyVersionQuerySet:
        return self.order_by("-version")


class PolicyVersion(models.Model):
    """The whole routing table, every provider override and every scrub rule as they stood at one
    policy version, written in the transaction that bumps it; restoring one writes it back as a new
    version."""

    version = models.PositiveIntegerField(unique=True)
    policies = models.JSONField(default=list, help_text="RoutingPolicy.snapshot() of every row")
    overrides = models.JSONField(default=list, help_text="ProviderOverride.snapshot() of every row")
    scrub_rules = models.JSONField(default=list, help_text="ScrubRule.snapshot() of every row")
    prices = models.JSONField(default=list, help_text="Price.snapshot() of every row")
    project_policies = models.JSONField(
        default=list, help_text="ProjectPolicy.snapshot() of every row"
    )
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
        return cls.objects.create(
            version=version,
            policies=[p.snapshot() for p in RoutingPolicy.objects.order_by("failure_type")],
            overrides=[o.snapshot() for o in ProviderOverride.objects.all()],
            scrub_rules=[r.snapshot() for r in ScrubRule.objects.all()],
            prices=[p.snapshot() for p in Price.objects.all()],
            project_policies=[
                p.snapshot()
                for p in ProjectPolicy.objects.select_related("project").order_by(
                    "project__slug", "failure_type"
                )
            ],
            actor_label=actor_label(actor),
            note=note,
            restored_from=restored_from,
        )

    def rules_by_type(self) -> dict[str, dict[str, Any]]:
        return {row["failure_type"]: completed_rule(row) for row in self.policies}

    def overrides_by_match(self) -> dict[tuple[str, str, str], dict[str, Any]]:
        return {(o["provider"], o["match_on"], o["match_value"]): o for o in self.overrides}

    def project_policies_by_match(self) -> dict[tuple[str, str], dict[str, Any]]:
        return {(p["project"], p["failure_type"]): completed_rule(p) for p in self.project_policies}

    def scrub_rules_by_match(self) -> dict[tuple[str, str], dict[str, Any]]:
        return {(r["kind"], r["value"]): r for r in self.scrub_rules}

    def prices_by_match(self) -> dict[tuple[str, str, str], dict[str, Any]]:
        return {(p["kind"], p["name"], p["effective_from"]): p for p in self.prices}

    def changes_since(self, older: PolicyVersion | None) -> list[dict[str, Any]]:
        """What differs from `older` (none for None): per changed routing field, per override, per
        scrub rule, per price, per project's routing row."""
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
        keyed = (
            (
                lambda m: "override " + ":".join(part or "*" for part in m),
                older.overrides_by_match(),
                self.overrides_by_match(),
            ),
            (
                lambda m: "scrub rule " + ":".join(m),
                older.scrub_rules_by_match(),
                self.scrub_rules_by_match(),
            ),
            (lambda m: "price " + ":".join(m), older.prices_by_match(), self.prices_by_match()),
            (
                lambda m: "project {} {}".format(*m),
                older.project_policies_by_match(),
                self.project_policies_by_match(),
            ),
        )
        for name, old_rows, new_rows in keyed:
            for match in sorted(old_rows.keys() | new_rows.keys()):
                old, new = old_rows.get(match), new_rows.get(match)
                if old != new:
                    changes.append({"what": name(match), "before": old, "after": new})
        return changes


class RoutingFields(models.Model):
    """How the coordinator routes one failure type: backoff, attempts, and what to do after.
    The global table (`RoutingPolicy`) and a project's overrides (`ProjectPolicy`) share it."""

    Jitter = Jitter

    EXHAUSTED_ACTIONS = [
        (a.value, a.label)
        for a in (
            Action.ESCALATE,
            Action.SWITCH_SOURCE,
            Action.SWITCH_AND_ESCALATE,
            Action.ACCEPT_PARTIAL,
            Action.ABORT,
        )
    ]
    REVIEW_FALLBACKS = [(a.value, a.label) for a in (Action.ACCEPT_PARTIAL, Action.ABORT)]
    OVER_BUDGET_ACTIONS = [(a.value, a.label) for a in (Action.ESCALATE, Action.ABORT)]

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
    over_budget_action = models.CharField(
        max_length=20,
        choices=OVER_BUDGET_ACTIONS,
        default=Action.ESCALATE,
        help_text="What a failure gets instead of a retry, a wait or a switch once its source or "
        "its agent is past its daily spend budget",
    )
    refresh_credentials = models.BooleanField(
        default=False,
        help_text="An auth failure whose caller can refresh its credentials (a source with a "
        "refresher, an agent that says it can) is refreshed and retried once before anything else",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True

    def clean(self) -> None:
        both = self.max_delay is not None and self.base_delay is not None
        if both and self.max_delay < self.base_delay:
            raise ValidationError({"max_delay": "The maximum delay must be ≥ the base delay."})
        if self.hard_fail and self.max_attempts and self.max_attempts > 1:
            raise ValidationError(
                {"max_attempts": "A hard-fail type is never retried: use 1 attempt."}
            )

    def snapshot(self) -> dict[str, Any]:
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
            "over_budget_action": self.over_budget_action,
            "refresh_credentials": self.refresh_credentials,
        }


# Values a migration gave some rows when their field was added, where the field's default was
# not what they got (0037: auth failures refresh their credentials first).
ADDED_WITH: dict[str, dict[str, Any]] = {"refresh_credentials": {"auth_failure": True}}


def completed_rule(row: dict[str, Any]) -> dict[str, Any]:
    """A routing row of a version kept before some of today's fields existed, with those fields
    at the value the row got when the field was added, its default unless `ADDED_WITH` says
    otherwise (so the row is not read as changed from null, and restoring it writes that value
    back)."""
    defaults = {
        key: ADDED_WITH.get(key, {}).get(row.get("failure_type"), value)
        for key, value in RoutingPolicy().snapshot().items()
        if value is not None and key != "failure_type"
    }
    return defaults | row


class RoutingPolicy(RoutingFields):
    """How the coordinator routes one failure type in every project that does not override it."""

    failure_type = models.CharField(max_length=20, choices=FailureType.choices, unique=True)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "routing policies"
        permissions = [("edit_policies", "Can edit routing policies and provider overrides")]

    def __str__(self) -> str:
        return f"policy for {self.failure_type}"


class ProjectPolicy(RoutingFields):
    """One project's routing of one failure type, in place of the global `RoutingPolicy` for
    that project's runs. Part of the policy: versioned and audited with it."""

    project = models.ForeignKey(
        "Project", on_delete=models.CASCADE, related_name="policies", db_constraint=True
    )
    failure_type = models.CharField(max_length=20, choices=FailureType.choices)

    class Meta:
        ordering = ["project", "failure_type"]
        verbose_name = "project routing policy"
        verbose_name_plural = "project routing policies"
        constraints = [
            models.UniqueConstraint(
                fields=["project", "failure_type"], name="projectpolicy_unique_type"
            )
        ]

    def __str__(self) -> str:
        return f"policy for {self.failure_type} in {self.project.slug}"

    def snapshot(self) -> dict[str, Any]:
        return {"project": self.project.slug, **super().snapshot()}


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


class ScrubRule(models.Model):
    """An operator's rule on top of the built-in secret filters (`classifier.scrub`): a key name
    whose values are secrets, a pattern whose matches are, or a safe field left as it is. Part
    of the policy: versioned, audited and fetched by agents with it."""

    class Kind(models.TextChoices):
        KEY = "key", "key name (its values are secrets)"
        PATTERN = "pattern", "pattern (a regular expression; its matches are secrets)"
        SAFE_FIELD = "safe_field", "safe field (its values are never filtered)"

    kind = models.CharField(max_length=20, choices=Kind.choices)
    value = models.CharField(
        max_length=300,
        help_text="A key name (matched whatever its case and separators, also at the end of a "
        "longer key: ssn matches Customer-SSN), a regular expression (only its group named "
        "'secret' is filtered, if it has one), or a safe field's key name",
    )
    note = models.CharField(max_length=300, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(default=timezone.now)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["kind", "value"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "value"], name="scrubrule_unique_value")
        ]

    def __str__(self) -> str:
        return f"{self.kind}: {self.value}"

    def clean(self) -> None:
        if self.kind == self.Kind.PATTERN:
            error = operator_pattern_error(self.value or "")
            if error:
                raise ValidationError({"value": f"This pattern is {error}."})
        elif not fold(self.value or ""):
            raise ValidationError({"value": "A key name needs a letter or a digit."})

    def snapshot(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value, "note": self.note, "enabled": self.enabled}

    @classmethod
    def rules(cls, rows: list[dict[str, Any]] | None = None) -> ScrubRules:
        """The enabled rules of `rows` (snapshots), or of the table as it is now."""
        if rows is None:
            rows = [rule.snapshot() for rule in cls.objects.filter(enabled=True)]
        return ScrubRules.from_data(rows)


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
    # When an answer last closed the open or half-open breaker.
    closed_at = models.DateTimeField(null=True, blank=True)
    # The provider asked everyone to wait (Retry-After): no call to this source before then.
    not_before = models.DateTimeField(null=True, blank=True)
    # When the hold ending at `not_before` began: a call started in between is an early one.
    hold_from = models.DateTimeField(null=True, blank=True)
    # Switched away from until a person repairs it (the policy's switch and escalate): new work
    # starts on the other sources first; the repair item's resolution re-enables it.
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["source"]
        verbose_name_plural = "source health"

    def __str__(self) -> str:
        return f"{self.source}: breaker {self.breaker_state}, budget {self.budget_tokens:.0f}"

    @property
    def budget_empty(self) -> bool:
        return self.budget_tokens < self.retry_cost

    def repair_state(self) -> dict[str, Any]:
        """What re-enabling changes, for its audit row."""
        return {
            "breaker_state": self.breaker_state,
            "consecutive_failures": self.consecutive_failures,
            "not_before": self.not_before.isoformat() if self.not_before else None,
            "disabled_at": self.disabled_at.isoformat() if self.disabled_at else None,
        }
