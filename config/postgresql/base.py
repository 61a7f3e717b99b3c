"""Django's PostgreSQL backend, each pooled connection checked as it is handed out and the
whole pool checked once one is found broken (settings: ENGINE when DATABASE_POOL is on).

psycopg's pool can check connections itself (what CONN_HEALTH_CHECKS asks of it), but it tries
the idle ones one by one and pauses 1 s, then 2 s, after each broken one: after a database
restart, with every idle connection broken, a request waited out the pool's timeout and was
answered 503 while the database was up again. Here the first broken connection has the pool
check all the others at once, so the next connection it hands out works.
"""

from __future__ import annotations

from typing import Any

import psycopg
from django.db.backends.postgresql import base
from psycopg_pool import ConnectionPool


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params: dict[str, Any]) -> Any:
        connection = super().get_new_connection(conn_params)
        if self.pool is None:
            return connection
        try:
            ConnectionPool.check_connection(connection)
        except psycopg.Error:
            self.pool.putconn(connection)  # broken: the pool discards it and opens another
            self.pool.check()
            connection = super().get_new_connection(conn_params)
        return connection
