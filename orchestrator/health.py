"""The probes of a load balancer or Kubernetes: `/healthz` (the process answers) and `/readyz`
(the database answers, every migration is applied, the broker answers within its timeout).

They are answered first in the middleware, for any Host (a probe addresses the pod's own
address, which ALLOWED_HOSTS does not list) and before sessions or sign-in, and `config.web`
sends them past the body reading and the admission limit, on threads of their own, so a busy
process still answers them. Their bodies say
nothing but the status; the reason a check failed goes to the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse

from orchestrator import workers

logger = logging.getLogger(__name__)

LIVE = "/healthz"
READY = "/readyz"
PATHS = frozenset([LIVE, READY])
BROKER_TIMEOUT = 1.5


def migrations_applied() -> bool:
    """Whether the database has every migration this code knows (about 5 ms)."""
    executor = MigrationExecutor(connection)
    return not executor.migration_plan(executor.loader.graph.leaf_nodes())


def database_answers() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        return cursor.fetchone() == (1,)


def broker_answers() -> bool:
    with workers.broker_connection(BROKER_TIMEOUT) as conn:
        return workers.reachable(conn)


CHECKS: dict[str, Callable[[], bool]] = {
    "database": database_answers,
    "migrations": migrations_applied,
    "broker": broker_answers,
}


def ready() -> bool:
    """Run the checks in order; log the first that fails and why."""
    for name, check in CHECKS.items():
        try:
            passed = check()
        except (DatabaseError, workers.BrokerUnavailable) as exc:
            logger.warning("readyz: %s unavailable: %s", name, exc)
            return False
        if not passed:
            logger.warning("readyz: %s not ready", name)
            return False
    return True


def answer(ok: bool) -> HttpResponse:
    body = {"status": "ok"} if ok else {"status": "unavailable"}
    response = JsonResponse(body, status=200 if ok else 503)
    response["Cache-Control"] = "no-store"
    return response


class ProbeMiddleware:
    """First in MIDDLEWARE: answers GET and HEAD of the probes' paths itself."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info not in PATHS or request.method not in ("GET", "HEAD"):
            return self.get_response(request)
        return answer(request.path_info == LIVE or ready())
