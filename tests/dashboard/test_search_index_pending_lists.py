"""The top bar's trigram indexes on review items, workflows and failure groups keep no pending
list (migration dashboard 0013): a search reads every entry a pending list holds, up to 4 MB."""

from __future__ import annotations

import pytest
from django.db import connection

from ..conftest import require_service

pytestmark = pytest.mark.django_db

INDEXES = (
    "reviewitem_reason_trgm",
    "workflow_name_trgm",
    "workflow_goal_trgm",
    "failuregroup_pattern_trgm",
    "failuregroup_example_trgm",
)


def test_the_search_indexes_write_their_entries_at_once():
    require_service(connection.vendor == "postgresql", "PostgreSQL (DATABASE_URL)")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, a.amname, c.reloptions FROM pg_class c "
            "JOIN pg_am a ON a.oid = c.relam WHERE c.relname = ANY(%s)",
            [list(INDEXES)],
        )
        found = {name: (method, options) for name, method, options in cursor.fetchall()}
    assert set(found) == set(INDEXES)
    for name, (method, options) in found.items():
        assert method == "gin", name
        assert "fastupdate=off" in (options or []), (name, options)
