"""The policies endpoint: the routing table and the enabled provider overrides, with their version.

Read-only for agents; operators edit policies on the dashboard or in the admin, through
`models.save_policy_change`, which bumps the version every decision records.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router

from orchestrator.api.errors import error_responses
from orchestrator.api.schemas import PoliciesOut
from orchestrator.models import PolicyState, ProviderOverride, RoutingPolicy

router = Router(tags=["policies"])


@router.get("", response={200: PoliciesOut, **error_responses()})
def current_policies(request: HttpRequest) -> dict[str, Any]:
    """The routing policy per failure type and the enabled provider overrides, with the version
    that every decision records."""
    # Re-read the version after the rows: an edit committed in between would pair new rows
    # with an old version (the version is what decisions record), so read again until stable.
    version = PolicyState.current_version()
    while True:
        snapshot = {
            "version": version,
            "policies": [policy.snapshot() for policy in RoutingPolicy.objects.all()],
            "overrides": [o.snapshot() for o in ProviderOverride.objects.filter(enabled=True)],
        }
        latest = PolicyState.current_version()
        if latest == version:
            return snapshot
        version = latest
