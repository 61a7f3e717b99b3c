"""Shared fixtures: the three kinds of user every page and endpoint test checks, API tokens, and
the guard that makes a test needing a real service fail (not skip) in CI."""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import connection, connections
from django.test.utils import override_settings

from orchestrator.coordination.registry import use_registry
from orchestrator.models import ApiToken

# The product registers no source of its own; the suite's workflows run on the demonstration's
# in-process sources (exceptions built on real httpx responses, no network).
TEST_SOURCES = "demo.inprocess"

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

# pytest-xdist's worker number (gw0 is 0, and a run without workers too).
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "serial: a slow test that must run alone (a timing bound, a cluster-wide read); "
        "`make test` runs these in one process after the other slow tests, which run in parallel",
    )
    # The user fixtures set passwords: a fast hasher, not PBKDF2 and its million rounds.
    override_settings(PASSWORD_HASHERS=["django.contrib.auth.hashers.MD5PasswordHasher"]).enable()
    own_cache_per_worker()


def own_cache_per_worker() -> None:
    """Give each further xdist worker the Redis database after CACHE_URL's (gw1 the next, …).

    Tests clear the cache (the rate limiter counts in it) and pages cache tiles under rollup
    versions that every worker's database numbers alike, so workers must not share it. The
    variable is changed too, for the servers and workers a test starts.
    """
    url = os.environ.get("CACHE_URL", "")
    if not WORKER or not url.startswith(("redis://", "rediss://")):
        return
    parts = urlsplit(url)
    own = urlunsplit(parts._replace(path=f"/{int(parts.path.strip('/') or 0) + WORKER}"))
    os.environ["CACHE_URL"] = own
    override_settings(CACHES={"default": settings.CACHES["default"] | {"LOCATION": own}}).enable()


def require_service(available: bool, what: str) -> None:
    """Skip a test whose real service is missing here; in CI, fail it instead."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is required in CI but is not available")
    pytest.skip(f"{what} not available (set DATABASE_URL / CELERY_BROKER_URL to run this test)")


@pytest.fixture(scope="session", autouse=True)
def _demo_sources() -> None:
    settings.FAILSIGHT_SOURCE_MODULES = [TEST_SOURCES]
    use_registry(None)


@pytest.fixture(scope="session", autouse=True)
def _close_pooled_connections(django_db_setup, django_db_blocker):
    """Close psycopg's pool, and any session a killed worker or server left behind, before
    pytest-django drops the test database (DROP DATABASE refuses while others are connected)."""
    yield
    from orchestrator.notify import Listener

    Listener.stop_all()  # its LISTEN connection would keep the test database open
    with django_db_blocker.unblock():
        for conn in connections.all():
            if conn.vendor == "postgresql" and hasattr(conn, "close_pool"):
                conn.close_pool()
            conn.close()
        if connection.vendor == "postgresql":
            _end_other_sessions(connection.settings_dict["NAME"])


def _end_other_sessions(database: str) -> None:
    import psycopg

    params = connection.get_connection_params() | {"dbname": "postgres", "autocommit": True}
    params.pop("cursor_factory", None)
    params.pop("pool", None)
    with psycopg.connect(**params) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = %s AND pid <> pg_backend_pid()",
            [database],
        )


@pytest.fixture
def frozen_memos(monkeypatch) -> None:
    """Stop the per-process memos' clock (policy version: 1 s, tokens: 5 s, spend) for a test that
    counts the queries of requests: on a loaded machine an entry expiring between two requests
    adds a re-read. Entries already there expire as they would now."""
    from orchestrator import memo

    frozen = memo.clock()
    monkeypatch.setattr(memo, "clock", lambda: frozen)


@pytest.fixture
def postgres(db) -> None:
    """Use in tests that need PostgreSQL's behaviour (concurrency, ON CONFLICT, NUL bytes)."""
    require_service(connection.vendor == "postgresql", "PostgreSQL")


@pytest.fixture
def operator(db) -> User:
    user = User.objects.create_user("olga", password="operator-pass-123")
    user.groups.add(Group.objects.get(name="operators"))
    return user


@pytest.fixture
def policy_editor(db) -> User:
    user = User.objects.create_user("paul", password="editor-pass-123")
    user.groups.add(Group.objects.get(name="policy editors"))
    return user


@pytest.fixture
def outsider(db) -> User:
    """Signed in, but in no group: may see nothing."""
    return User.objects.create_user("oscar", password="outsider-pass-123")


@pytest.fixture
def api_token(db) -> tuple[ApiToken, str]:
    return ApiToken.issue("test-agent")


@pytest.fixture
def auth_headers(api_token) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {api_token[1]}"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a transactional test without serialized_rollback.

    Such a test's flush re-creates content types with new ids (post_migrate), after which the
    next serialized test cannot restore the seeded groups and policies; with serialized_rollback
    everywhere, each transactional test starts from the migrated data.
    """
    for item in items:
        marker = item.get_closest_marker("django_db")
        kwargs = marker.kwargs if marker else {}
        fixtures = set(getattr(item, "fixturenames", ()))
        transactional = kwargs.get("transaction") or {"live_server", "transactional_db"} & fixtures
        if transactional and not kwargs.get("serialized_rollback"):
            raise pytest.UsageError(
                f"{item.nodeid}: use django_db(transaction=True, serialized_rollback=True)"
            )
        # `make test` runs the slow tests a module per worker in any order: a test in a rolled
        # back transaction there could follow a transactional one that flushed the database.
        if item.get_closest_marker("slow") and not transactional and (marker or "db" in fixtures):
            raise pytest.UsageError(
                f"{item.nodeid}: a slow test uses django_db(transaction=True, "
                "serialized_rollback=True) or no database"
            )
