"""django-axes' lockouts after repeated wrong passwords, in our audit trail: one `auth.lockout` row
at the attempt that crosses the limit, not one per refused attempt after it."""

from __future__ import annotations

from typing import Any

from axes.signals import user_locked_out
from django.conf import settings
from django.dispatch import receiver
from django.http import HttpRequest

from orchestrator.addresses import client_ip
from orchestrator.models import AuditEntry


@receiver(user_locked_out, dispatch_uid="dashboard.signin.audit_lockout")
def audit_lockout(
    sender: Any, request: HttpRequest, username: str | None, ip_address: str, **kwargs: Any
) -> None:
    failures = getattr(request, "axes_failures_since_start", None)
    if failures != settings.AXES_FAILURE_LIMIT:
        return  # an attempt while already locked out: the lockout was audited when it began
    AuditEntry.record_lockout(username or "", ip_address or client_ip(request), failures)
