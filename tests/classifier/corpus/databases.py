"""Data stores: redis and psycopg refused or silent, PostgreSQL's SQLSTATEs through psycopg
and asyncpg, MySQL / MariaDB error numbers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tests.classifier.corpus.cases import (
    MARIADB,
    POSTGRES,
    PRIVATE_POSTGRES,
    TIMEOUT_S,
    Call,
    Case,
    Prepare,
    T,
    calling,
)
from tests.classifier.faults import FaultEnv

# --- redis, psycopg -----------------------------------------------------------------------------


def redis_client(port_of: Callable[[FaultEnv], int]) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import redis

        client = redis.Redis(
            host="127.0.0.1",
            port=port_of(env),
            socket_connect_timeout=TIMEOUT_S,
            socket_timeout=TIMEOUT_S,
            retry=None,
        )
        try:
            yield client.ping
        finally:
            client.close()

    return prepare


def _psycopg(port_of: Callable[[FaultEnv], int]) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import psycopg

        return lambda: psycopg.connect(
            host="127.0.0.1", port=port_of(env), user="x", dbname="x", connect_timeout=2
        )

    return calling(make)


DATA_STORES = [
    Case(
        "redis: connection refused is transient",
        redis_client(lambda env: env.closed),
        T.TRANSIENT,
        {"exception_type": "redis.exceptions.ConnectionError"},
    ),
    Case("redis: a silent server is a timeout", redis_client(lambda env: env.silent), T.TIMEOUT),
    Case(
        "psycopg: connection refused (OperationalError) is transient",
        _psycopg(lambda env: env.closed),
        T.TRANSIENT,
    ),
]


# --- PostgreSQL: SQLSTATE class 28 through psycopg and asyncpg ----------------------------------
#
# The machine's PostgreSQL trusts every existing role, so a wrong password needs a private
# cluster with password authentication; a role that does not exist fails on either.

MISSING_ROLE, MISSING_DB = "failsight_no_such_role", "failsight_no_such_db"


def _psycopg_login(user: str, dbname: str, *, private: bool = False) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import psycopg

        port = env.private_postgres() if private else 5432
        password = "wrong-password" if private else None
        return lambda: psycopg.connect(
            host="127.0.0.1",
            port=port,
            user=user,
            password=password,
            dbname=dbname,
            connect_timeout=3,
        )

    return calling(make)


def _asyncpg_login(user: str, database: str, *, private: bool = False) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import asyncpg

        port = env.private_postgres() if private else 5432
        password = "wrong-password" if private else None

        async def call() -> None:
            connection = await asyncpg.connect(
                host="127.0.0.1",
                port=port,
                user=user,
                password=password,
                database=database,
                timeout=3,
            )
            await connection.close()

        return lambda: asyncio.run(call())

    return calling(make)


def _psycopg_query(sql: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import psycopg

        with psycopg.connect(
            host="127.0.0.1",
            port=5432,
            user="postgres",
            dbname="postgres",
            connect_timeout=3,
            autocommit=True,
        ) as connection:
            yield lambda: connection.execute(sql)

    return prepare


POSTGRESQL = [
    # libpq keeps only the text of a connection failure: the server's own message for a missing
    # role says "does not exist", but its SQLSTATE is 28000, and the code beats the message.
    Case(
        "psycopg: a role that does not exist is auth_failure (SQLSTATE 28000), not missing",
        _psycopg_login(MISSING_ROLE, "postgres"),
        T.AUTH_FAILURE,
        {"provider_code": "28000", "signal": "provider_code", "retryable": False},
        needs=POSTGRES,
        why="libpq keeps only the text, which is the server's 28000: class 28 beats the message",
    ),
    Case(
        "psycopg: a wrong password is auth_failure (SQLSTATE 28P01)",
        _psycopg_login("postgres", "postgres", private=True),
        T.AUTH_FAILURE,
        {"provider_code": "28P01"},
        needs=PRIVATE_POSTGRES,
        why="a private cluster with scram-sha-256: the machine's trusts every role",
    ),
    Case(
        "psycopg: a database that does not exist is resource_missing (SQLSTATE 3D000)",
        _psycopg_login("postgres", MISSING_DB),
        T.RESOURCE_MISSING,
        {"provider_code": "3D000"},
        needs=POSTGRES,
        why="'does not exist' again, but 3D000: the target is missing, not the credentials",
    ),
    Case(
        "psycopg: a query on a missing table is resource_missing (SQLSTATE 42P01)",
        _psycopg_query("SELECT * FROM failsight_no_such_table"),
        T.RESOURCE_MISSING,
        {"provider_code": "42P01"},
        needs=POSTGRES,
        why="an UndefinedTable names a target that is not there, as MySQL's 1146",
    ),
    Case(
        "psycopg: a syntax error is invalid_input (SQLSTATE 42601)",
        _psycopg_query("SELEC 1"),
        T.INVALID_INPUT,
        {"provider_code": "42601"},
        needs=POSTGRES,
        why="class 42 otherwise: the statement must change",
    ),
    Case(
        "asyncpg: a role that does not exist is auth_failure (its sqlstate 28000)",
        _asyncpg_login(MISSING_ROLE, "postgres"),
        T.AUTH_FAILURE,
        {"provider_code": "28000"},
        needs=POSTGRES,
        why="asyncpg keeps the server's code on the exception",
    ),
    Case(
        "asyncpg: a wrong password is auth_failure (28P01)",
        _asyncpg_login("postgres", "postgres", private=True),
        T.AUTH_FAILURE,
        {"provider_code": "28P01"},
        needs=PRIVATE_POSTGRES,
        why="InvalidPasswordError from the private cluster",
    ),
    Case(
        "asyncpg: a database that does not exist is resource_missing (3D000)",
        _asyncpg_login("postgres", MISSING_DB),
        T.RESOURCE_MISSING,
        {"provider_code": "3D000"},
        needs=POSTGRES,
        why="InvalidCatalogNameError: the same rule through the other driver",
    ),
]


# --- MySQL / MariaDB: error numbers, not their generic SQLSTATE ---------------------------------


def _pymysql_login(password: str | None = None, database: str | None = None) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import pymysql

        return lambda: pymysql.connect(
            host="127.0.0.1",
            user="root",
            password=password or "",
            database=database,
            connect_timeout=3,
        )

    return calling(make)


def _pymysql_query(*statements: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import pymysql

        connection = pymysql.connect(
            host="127.0.0.1", user="root", database="test", connect_timeout=3
        )
        try:
            with connection.cursor() as cursor:
                for statement in statements[:-1]:
                    cursor.execute(statement)
                yield lambda: cursor.execute(statements[-1])
        finally:
            connection.close()

    return prepare


def _pymysql_refused(env: FaultEnv) -> Call:
    import pymysql

    return lambda: pymysql.connect(host="127.0.0.1", port=env.closed, connect_timeout=1)


MYSQL = [
    Case(
        "PyMySQL: a wrong password is auth_failure (error 1045)",
        _pymysql_login(password="wrong-password"),
        T.AUTH_FAILURE,
        {"provider_code": "1045", "retryable": False},
        needs=MARIADB,
        why="ER_ACCESS_DENIED_ERROR, read from args[0]",
    ),
    # 1049's SQLSTATE is 42000, the syntax-error class: the number says what happened.
    Case(
        "PyMySQL: an unknown database is resource_missing (1049), not its SQLSTATE 42000",
        _pymysql_login(database="failsight_no_such_db"),
        T.RESOURCE_MISSING,
        {"provider_code": "1049"},
        needs=MARIADB,
        why="MySQL files 1049 under the syntax class; the number is the precise signal",
    ),
    Case(
        "PyMySQL: a missing table is resource_missing (1146), not its SQLSTATE 42S02",
        _pymysql_query("SELECT * FROM failsight_no_such_table"),
        T.RESOURCE_MISSING,
        {"provider_code": "1146"},
        needs=MARIADB,
        why="ER_NO_SUCH_TABLE, whose SQLSTATE would read as a syntax error",
    ),
    Case(
        "PyMySQL: a syntax error is invalid_input (1064)",
        _pymysql_query("SELEC 1"),
        T.INVALID_INPUT,
        {"provider_code": "1064"},
        needs=MARIADB,
        why="ER_PARSE_ERROR: the statement must change",
    ),
    Case(
        "PyMySQL: a duplicate key is invalid_input (1062)",
        _pymysql_query(
            "CREATE TEMPORARY TABLE failsight_dup (id INT PRIMARY KEY)",
            "INSERT INTO failsight_dup VALUES (1)",
            "INSERT INTO failsight_dup VALUES (1)",
        ),
        T.INVALID_INPUT,
        {"provider_code": "1062"},
        needs=MARIADB,
        why="ER_DUP_ENTRY (an IntegrityError): retrying inserts the same key",
    ),
    Case(
        "PyMySQL: connection refused is transient (2003)",
        calling(_pymysql_refused),
        T.TRANSIENT,
        {"provider_code": "2003"},
        why="CR_CONN_HOST_ERROR: nothing listens yet",
    ),
]
