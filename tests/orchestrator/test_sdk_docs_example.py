"""docs/sdk.md's example, run as written against a live server: a tracked call that fails gets
its run's id for `decide()`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from orchestrator.models import ApiToken, Run

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)
EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "sdk.md"
SERVER = "http://failsight:8000"


def example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", EXAMPLE.read_text(), re.S)
    return next(block for block in blocks if "client.track(" in block)


def test_the_sdk_example_decides_on_the_run_a_tracked_call_reported(live_server):
    _, secret = ApiToken.issue("docs-agent")
    calls = iter([["a film"]])

    def search(query: str) -> list[Any]:
        for results in calls:
            return results
        raise TimeoutError("read timed out")

    code = example()
    assert "decide(" in code and SERVER in code
    scope: dict[str, Any] = {"token": secret, "search": search}
    try:
        exec(compile(code.replace(SERVER, live_server.url), str(EXAMPLE), "exec"), scope)
    finally:
        scope["client"].close()
    assert scope["decision"]["action"] == "retry"
    run = Run.objects.get(pk=scope["call"].run["id"])
    assert (run.status, run.failure_type, run.decision) == ("failed", "timeout", "retry")
