"""Secrets filtered out of what agents report, at the door (`classifier.scrub`): the built-in
rules with the operators' `ScrubRule`s of the current policy version, compiled by RE2
(`orchestrator.patterns`) once per version and process; the count of what was filtered is kept
on each run (`Run.scrubbed_fields`). The ingest pipeline's `scrub` step is the one call over a
whole report."""

from __future__ import annotations

import threading
from typing import Any

from django.db.models import Sum

from classifier.scrub import Scrubber
from orchestrator.models import PolicyState, PolicyVersion, Run, ScrubRule
from orchestrator.patterns import compile_re2

_lock = threading.Lock()
_scrubbers: dict[int, Scrubber] = {}


def current() -> Scrubber:
    """Return the scrubber of the policy version announced lately (one read a second at most)."""
    version = PolicyState.announced_version()
    found = _scrubbers.get(version)
    if found is None:
        found = Scrubber(rules_at(version), compile_re2)
        with _lock:
            _scrubbers.clear()
            _scrubbers[version] = found
    return found


def forget() -> None:
    """Drop the compiled rules: a policy change in this process (whose version number a
    rolled-back transaction may have shown) compiles them again."""
    with _lock:
        _scrubbers.clear()


def rules_at(version: int) -> Any:
    """The scrub rules of policy `version` as its snapshot kept them (the table's, without one)."""
    rows = PolicyVersion.objects.filter(version=version).values_list("scrub_rules", flat=True)
    return ScrubRule.rules(rows.first())


def scrub_text(text: str) -> str:
    return current().text(text)[0] if text else text


def scrub_data(value: Any) -> Any:
    return current().scrub(value)[0] if value else value


def scrub_idempotency_key(key: str | None) -> str | None:
    """An Idempotency-Key header as it is kept: a digest of it when it holds a credential."""
    return current().idempotency_key(key) if key else key


def scrubbed_fields_total() -> int:
    """Every value filtered as a secret in the runs kept: one aggregate, over the runs that held
    any (index `run_scrubbed`)."""
    found = Run.objects.filter(scrubbed_fields__gt=0).aggregate(total=Sum("scrubbed_fields"))
    return found["total"] or 0
