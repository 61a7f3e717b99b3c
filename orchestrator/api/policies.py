"""The policies endpoint: the routing table and the enabled provider overrides, with their version,
and the `X-Policy-Version` header every API answer carries.

Read-only for agents; operators edit policies on the dashboard or in the admin, through
`models.save_policy_change`, which bumps the version every decision records. The header lets an
agent that embeds the classifier (`AgentClient`) notice an edit on any answer and fetch this
endpoint again, so that operators' overrides reach its classifications too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from ninja import Router

from orchestrator.api.errors import error_responses
from orchestrator.api.schemas import PoliciesOut
from orchestrator.models import PolicyState, ProviderOverride, RoutingPolicy

logger = logging.getLogger(__name__)

router = Router(tags=["policies"])

VERSION_HEADER = "X-Policy-Version"


def with_policy_version(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Wrap an API view so that its answer, errors included, carries the policy version."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if response.status_code == 503:
            # The database is unavailable: asking it for the version would make the client wait
            # a second connection timeout for an answer that cannot carry one anyway.
            return response
        try:
            response[VERSION_HEADER] = str(PolicyState.announced_version())
        except DatabaseError:  # the database is down: the answer says so; no version to tell
            logger.warning("policy version unavailable for %s", request.path, exc_info=True)
        return response

    return wrapper


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
