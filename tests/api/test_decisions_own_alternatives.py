"""`POST /decisions` ranks an agent's own alternatives (sources it can call, registered here or
not) by switch efficacy, as the built-in coordinator orders its own, and switches to the best."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.cache import cache
from django.utils import timezone

from orchestrator.coordination import efficacy
from orchestrator.models import Run
from tests.api.helpers import post_json

MISSING = {"failure_type": "resource_missing", "status_code": 404, "detail": "no such page"}


@pytest.fixture
def switches(settings):
    """From my_wiki: 3 switches to slow_mirror (1 worked), 3 to fast_mirror (3 worked)."""
    settings.SWITCH_EFFICACY_MIN_SWITCHES = 3
    now = timezone.now() - timedelta(minutes=5)
    for target, worked in (("slow_mirror", 1), ("fast_mirror", 3)):
        for i in range(3):
            failed = Run.objects.create(
                agent="a", source="my_wiki", status=Run.Status.FAILED,
                failure_type="resource_missing", finished_at=now, created_at=now,
            )  # fmt: skip
            status = Run.Status.SUCCEEDED if i < worked else Run.Status.FAILED
            Run.objects.create(
                agent="a", source=target, status=status, switched_from=failed,
                finished_at=now, created_at=now,
            )  # fmt: skip
    efficacy.refresh()
    yield
    cache.delete(efficacy.CACHE_KEY)


def test_an_agents_own_alternatives_are_ranked_back_and_the_best_is_switched_to(
    client, auth_headers, switches
):
    body = {
        "failure": MISSING,
        "source": "my_wiki",
        "alternatives": ["slow_mirror", "fast_mirror", "my_wiki"],
    }
    answer = post_json(client, "/decisions", body, **auth_headers)
    assert answer.status_code == 200, answer.content
    data = answer.json()
    assert data["alternatives"] == ["fast_mirror", "slow_mirror"]
    assert (data["action"], data["switch_to"]) == ("switch_source", "fast_mirror")
    # Tried already: never proposed.
    body["tried"] = ["fast_mirror"]
    data = post_json(client, "/decisions", body, **auth_headers).json()
    assert (data["switch_to"], data["alternatives"]) == ("slow_mirror", ["slow_mirror"])


def test_the_failures_own_alternatives_are_ranked_too(client, auth_headers, switches):
    failure = MISSING | {"alternatives": ["slow_mirror", "fast_mirror", "ask a librarian"]}
    data = post_json(
        client, "/decisions", {"failure": failure, "source": "my_wiki"}, **auth_headers
    ).json()
    assert data["alternatives"] == ["fast_mirror", "slow_mirror"]
    assert data["switch_to"] == "fast_mirror"
