"""System checks for the pages' middleware. Django's own security checks look for its CSRF and
clickjacking middleware by dotted name (security.W003, security.W002); the pages run them as the
subclasses in `dashboard.middleware`, which those checks cannot see. These checks take their
place: a deployment without either protection still fails `check --deploy`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks

# Each protection, and the names under which its middleware may stand in MIDDLEWARE.
PROTECTIONS = {
    "dashboard.E001": (
        "cross-site request forgery protection",
        ("dashboard.middleware.CsrfViewMiddleware", "django.middleware.csrf.CsrfViewMiddleware"),
    ),
    "dashboard.E002": (
        "clickjacking protection (X-Frame-Options)",
        (
            "dashboard.middleware.XFrameOptionsMiddleware",
            "django.middleware.clickjacking.XFrameOptionsMiddleware",
        ),
    ),
}


@checks.register(checks.Tags.security, deploy=True)
def pages_protected(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """An error for each protection whose middleware is not in MIDDLEWARE."""
    return [
        checks.Error(f"The pages have no {what}: add {names[0]} to MIDDLEWARE.", id=check_id)
        for check_id, (what, names) in PROTECTIONS.items()
        if not set(names) & set(settings.MIDDLEWARE)
    ]
