"""Changing the routing policy (its routing table, provider overrides and scrub rules): every
edit and deletion goes through here, in one transaction with a version bump, the version's
snapshot and an audit row, so no change escapes the audit trail or leaves decisions (or the secret
filters) on a stale cached snapshot. A restore is an operator action
(`actions.do_restore_policy_version`) built from the steps here."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from orchestrator import pricing, scrubbing
from orchestrator.coordination import dispatch
from orchestrator.models import (
    AuditEntry,
    PolicyState,
    PolicyVersion,
    Price,
    Project,
    ProjectPolicy,
    ProviderOverride,
    ReviewItem,
    RoutingPolicy,
    ScrubRule,
)

PolicyObject = RoutingPolicy | ProjectPolicy | ProviderOverride | ScrubRule | Price


def save_policy_change(obj: PolicyObject, actor: Any, note: str = "", channel: str = "") -> int:
    """Save a policy, override or scrub rule edit with its audit row (naming the `channel` it
    came from) and a version bump; return the version."""
    with transaction.atomic():
        before = None
        if obj.pk:
            old = type(obj).objects.select_for_update().filter(pk=obj.pk).first()
            before = old.snapshot() if old else None
        obj.full_clean()
        obj.save()
        if isinstance(obj, Price):
            _reprice_edit(obj, before, obj.effective_from)
        change = "update" if before else "create"
        return _new_version(obj, actor, note, change, before, obj.snapshot(), channel)


def delete_policy_object(
    obj: ProjectPolicy | ProviderOverride | ScrubRule | Price,
    actor: Any,
    note: str = "",
    channel: str = "",
) -> int:
    """Delete an override, a scrub rule or a price with its audit row and a version bump; return
    the version."""
    with transaction.atomic():
        before = obj.snapshot()
        pk = obj.pk
        obj.delete()
        obj.pk = pk
        if isinstance(obj, Price):
            _reprice_edit(obj, before, None)
        return _new_version(obj, actor, note, "delete", before, {}, channel)


def _new_version(
    obj: PolicyObject,
    actor: Any,
    note: str,
    change: str,
    before: dict[str, Any] | None,
    after: dict[str, Any],
    channel: str,
) -> int:
    """Bump the version, keep its snapshot and audit the change; return the version."""
    scrubbing.forget()
    pricing.forget()
    version = PolicyState.bump()
    PolicyVersion.capture(version, actor, note)
    AuditEntry.record(
        actor=actor,
        action=f"{obj._meta.model_name}.{change}",
        obj=obj,
        before=before,
        after=after | {"version": version},
        note=note,
        channel=channel,
    )
    return version


def lock_versions() -> int:
    """Lock the version counter for this transaction (one restore at a time); return the
    current version."""
    PolicyState.objects.get_or_create(pk=1)
    PolicyState.objects.select_for_update().filter(pk=1).first()
    return PolicyState.current_version()


def write_back(target: PolicyVersion) -> None:
    """Write `target`'s routing table, overrides, scrub rules, projects' overrides and prices
    back over the current ones (their repricing is enqueued in this transaction)."""
    for row in target.rules_by_type().values():
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
    _restore_scrub_rules(target)
    _restore_project_policies(target)
    _restore_prices(target)


def capture_restore(actor: Any, note: str, restored_from: int) -> PolicyVersion:
    """Bump the version after a `write_back` and keep its snapshot (cached filters and prices
    forgotten)."""
    scrubbing.forget()
    pricing.forget()
    version = PolicyState.bump()
    return PolicyVersion.capture(version, actor, note, restored_from=restored_from)


def _restore_project_policies(target: PolicyVersion) -> None:
    """Projects' overrides as `target` kept them (those of a project deleted since are gone)."""
    wanted = target.project_policies_by_match()
    for row in ProjectPolicy.objects.select_related("project"):
        if (row.project.slug, row.failure_type) not in wanted:
            row.delete()
    projects = Project.objects.in_bulk({slug for slug, _ in wanted}, field_name="slug")
    for (slug, ftype), row in wanted.items():
        if slug in projects:
            fields = {k: v for k, v in row.items() if k not in ("project", "failure_type")}
            ProjectPolicy.objects.update_or_create(
                project=projects[slug], failure_type=ftype, defaults=fields
            )


def _restore_scrub_rules(target: PolicyVersion) -> None:
    wanted = target.scrub_rules_by_match()
    for rule in ScrubRule.objects.all():
        if (rule.kind, rule.value) not in wanted:
            rule.delete()
    for (kind, value), row in wanted.items():
        fields = {k: row[k] for k in ("note", "enabled")}
        ScrubRule.objects.update_or_create(kind=kind, value=value, defaults=fields)


def _restore_prices(target: PolicyVersion) -> None:
    """Write back `target`'s price rows; each kind and name whose rows change is priced again
    from its earliest changed start on."""
    wanted = target.prices_by_match()
    have = {(p.kind, p.name, p.effective_from.isoformat()): p for p in Price.objects.all()}
    changed: dict[tuple[str, str], datetime] = {}
    for match in have.keys() | wanted.keys():
        row = wanted.get(match)
        now = have[match].snapshot() if match in have else None
        if row == now:
            continue
        kind, name, start = match
        at = datetime.fromisoformat(start)
        changed[(kind, name)] = min(at, changed.get((kind, name), at))
        if row is None:
            have[match].delete()
            continue
        fields = {k: row[k] for k in PRICE_VALUES}
        Price.objects.update_or_create(kind=kind, name=name, effective_from=at, defaults=fields)
    for (kind, name), since in sorted(changed.items()):
        _schedule_reprice(pricing.Window(kind, name, since))


PRICE_VALUES = Price.VALUE_FIELDS


def _schedule_reprice(window: pricing.Window) -> None:
    """Send the repricing of `window` through the outbox, in the edit's transaction; a window
    starting in the future holds no run yet (ingest prices them)."""
    if window.since <= timezone.now():
        dispatch.enqueue(pricing.REPRICE_TASK, window.as_args())


def _reprice_edit(price: Price, before: dict[str, Any] | None, after: datetime | None) -> None:
    """Price again the runs the edit of `price` (its snapshot `before`) changes."""
    old = datetime.fromisoformat(before["effective_from"]) if before else None
    if old is None and after is None:
        return
    kinds = {(price.kind, price.name)}
    if before:
        kinds.add((before["kind"], before["name"]))
    for kind, name in sorted(kinds):
        _schedule_reprice(pricing.window_of_change(kind, name, old, after))


def save_override_from_review(
    item: ReviewItem, user: Any, failure_type: str, note: str, channel: str
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
    return save_policy_change(override, user, f"saved from review item {item.pk}", channel)
