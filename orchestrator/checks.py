"""System checks for a deployment: what `manage.py check --deploy` must refuse."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register

PER_PROCESS_CACHES = (
    "django.core.cache.backends.locmem.LocMemCache",
    "django.core.cache.backends.dummy.DummyCache",
)


@register(Tags.caches, Tags.security, deploy=True)
def rate_limit_cache_is_shared(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    # A per-process cache gives each web process its own count: a token gets several limits.
    backend = settings.CACHES["default"]["BACKEND"]
    if not settings.API_RATE_LIMIT_PER_MINUTE or backend not in PER_PROCESS_CACHES:
        return []
    return [
        Error(
            "The API rate limit is counted in a per-process cache.",
            hint="Set CACHE_URL=redis://… so every web process shares one count per token "
            "(or API_RATE_LIMIT_PER_MINUTE=0 to turn the limit off).",
            id="failsight.E001",
        )
    ]
