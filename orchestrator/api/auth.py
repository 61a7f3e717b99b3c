"""Who may call the API and how often: bearer tokens and a per-token rate limit."""

from __future__ import annotations

import logging
import time
from functools import lru_cache

import redis
from django.conf import settings
from django.core.cache import cache, caches
from django.core.cache.backends.redis import RedisCache
from django.http import HttpRequest
from ninja.security import HttpBearer
from ninja.throttling import BaseThrottle

from orchestrator.api.errors import throttled, unauthenticated
from orchestrator.api.middleware import host_refusal
from orchestrator.models import ApiToken

logger = logging.getLogger(__name__)


class BearerToken(HttpBearer):
    """`Authorization: Bearer <secret>`; unknown and revoked secrets are refused alike (401)."""

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        found = ApiToken.objects.authenticate_cached(token)
        if found is not None:
            found.touch()  # writes at most once a minute per token
        return found


class TokenRateThrottle(BaseThrottle):
    """At most API_RATE_LIMIT_PER_MINUTE requests per token per clock minute, counted per process
    unless CACHE_URL is shared. A fixed window lets a burst reach twice the limit across a
    boundary: enough to stop runaway loops."""

    WINDOW = 60

    def __init__(self) -> None:
        self._wait = float(self.WINDOW)

    def allow_request(self, request: HttpRequest) -> bool:
        limit = settings.API_RATE_LIMIT_PER_MINUTE
        token = getattr(request, "auth", None)
        if not limit or token is None:
            return True
        now = time.time()
        window = int(now // self.WINDOW)
        # Every request in a window shares this wait, so a concurrent overwrite is harmless.
        self._wait = self.WINDOW - (now % self.WINDOW)
        try:
            return self._count(f"api-rate:{token.pk}:{window}") <= limit
        except Exception:  # a cache outage must not take the API down with it
            logger.warning("rate limit cache unavailable; request allowed", exc_info=True)
            return True

    def _count(self, key: str) -> int:
        counted = _incr_in_redis(key, self.WINDOW * 2)
        if counted is not None:
            return counted
        try:
            return cache.incr(key)
        except ValueError:  # the window's first request
            pass
        cache.add(key, 0, timeout=self.WINDOW * 2)
        try:
            return cache.incr(key)
        except ValueError:  # expired between add and incr
            cache.set(key, 1, timeout=self.WINDOW * 2)
            return 1

    def wait(self) -> float:
        return self._wait


def _incr_in_redis(key: str, timeout: int) -> int | None:
    """Count `key` up in one round trip when the cache is Redis (Django's `add` + `incr` take
    three); None for another cache. A lost EXPIRE leaves a key of a past window, never read."""
    default = caches["default"]  # `cache` is a proxy: isinstance needs the backend itself
    if not isinstance(default, RedisCache):
        return None
    name = default.make_and_validate_key(key)
    client = _redis_client(settings.CACHES["default"]["LOCATION"])
    count = int(client.incr(name))
    if count == 1:
        client.expire(name, timeout)
    return count


@lru_cache
def _redis_client(url: str) -> redis.Redis:
    """One client (and its connection pool, shared by threads) per process and Redis URL."""
    return redis.Redis.from_url(url)


def admitted(request: HttpRequest, throttle: TokenRateThrottle) -> ApiToken:
    """The token of a request to an agents' endpoint outside the REST API's routing (/mcp),
    checked as the API checks its own: the Host, the bearer token, the token's rate limit.
    Raise the API's ApiError for a refusal."""
    refusal = host_refusal(request)
    if refusal is not None:
        raise refusal
    token = BearerToken()(request)
    if token is None:
        raise unauthenticated()
    request.auth = token  # type: ignore[attr-defined]  # read by the throttle, as ninja sets it
    if not throttle.allow_request(request):
        raise throttled(throttle.wait())
    return token
