"""The web server's worker: gunicorn's threaded worker, telling the app how long a request waited.

gunicorn's `gthread` worker hands each readable connection to a pool of threads; under overload
the connections queue up in front of that pool, and a request served after its client gave up is
work for nobody. This worker records when each connection was queued and passes it to the app as
`environ[QUEUED_AT]` (a `time.monotonic()` value), so that `orchestrator.api.overload` (around
the application in `config.wsgi`) can answer a request that waited too long with a fast 503
instead of processing it late.

    gunicorn config.wsgi --worker-class config.server.ThreadWorker --threads 8
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from gunicorn.workers.gthread import ThreadWorker as GunicornThreadWorker

QUEUED_AT = "failsight.queued_at"  # the name orchestrator.api.overload reads

_handling = threading.local()


class ThreadWorker(GunicornThreadWorker):
    def enqueue_req(self, conn: Any) -> None:
        conn.queued_at = time.monotonic()
        super().enqueue_req(conn)

    def handle(self, conn: Any) -> Any:
        _handling.queued_at = getattr(conn, "queued_at", None)
        return super().handle(conn)

    def load_wsgi(self) -> None:
        super().load_wsgi()
        self.wsgi = _with_queue_time(self.wsgi)


def _with_queue_time(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        queued_at = getattr(_handling, "queued_at", None)
        if queued_at is not None:
            environ[QUEUED_AT] = queued_at
        return app(environ, start_response)

    return wrapped
