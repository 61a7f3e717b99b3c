"""Django's PostgreSQL backend, whose first broken pooled connection has the pool check all the
others at once: psycopg's own check (CONN_HEALTH_CHECKS) pauses after each broken one, so after a
database restart a request waited out the pool's timeout."""

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
