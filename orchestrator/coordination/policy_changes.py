"""Changing the routing policy: every edit, deletion and restore goes through here, in one
transaction with a version bump, the version's snapshot and an audit row, so no change escapes the
audit trail or leaves decisions on a stale cached snapshot."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from orchestrator.models import (
    AuditEntry,
    PolicyState,
    PolicyVersion,
    ProviderOverride,
    ReviewItem,
    RoutingPolicy,
)


def save_policy_change(obj: RoutingPolicy | ProviderOverride, actor: Any, note: str = "") -> int:
    """Save a policy or override edit with its audit row and a version bump; return the version."""
    with transaction.atomic():
        before = None
        if obj.pk:
            old = type(obj).objects.select_for_update().filter(pk=obj.pk).first()
            before = old.snapshot() if old else None
        obj.full_clean()
        obj.save()
        change = "update" if before else "create"
        return _new_version(obj, actor, note, change, before, obj.snapshot())


def delete_policy_object(obj: ProviderOverride, actor: Any, note: str = "") -> int:
    """Delete an override with its audit row and a version bump; return the version."""
    with transaction.atomic():
        before = obj.snapshot()
        pk = obj.pk
        obj.delete()
        obj.pk = pk
        return _new_version(obj, actor, note, "delete", before, {})


def _new_version(
    obj: RoutingPolicy | ProviderOverride,
    actor: Any,
    note: str,
    change: str,
    before: dict[str, Any] | None,
    after: dict[str, Any],
) -> int:
    """Bump the version, keep its snapshot and audit the change; return the version."""
    version = PolicyState.bump()
    PolicyVersion.capture(version, actor, note)
    AuditEntry.record(
        actor=actor,
        action=f"{obj._meta.model_name}.{change}",
        obj=obj,
        before=before,
        after=after | {"version": version},
        note=note,
    )
    return version


def restore_policy_version(number: int, actor: Any, note: str = "") -> PolicyVersion:
    """Write version `number`'s routing table and overrides back as a new version, audited.

    Never a rewind: decisions recorded under the versions in between keep their meaning.
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


def save_override_from_review(
    item: ReviewItem, user: Any, failure_type: str, note: str
) -> int | None:
    """Turn a review item's raw error into a provider override classifying it as `failure_type`;
    return the version, or None if the run carried no signal to match on."""
    run = item.run
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
    override.note = (note or f"From review item {item.pk}")[:300]
    if override.pk is None:
        override.created_by = user if getattr(user, "is_authenticated", False) else None
    return save_policy_change(override, user, note=f"saved from review item {item.pk}")
