"""The whole API, generated from its OpenAPI document: schemathesis sends every operation a
bounded number of cases (valid ones and deliberately wrong ones) with a valid bearer token,
against the web server as shipped on a database of its own, and no answer may be a 5xx.

The server's database sits beside the test database (dropped afterwards), so the runs and
workflows the cases create never reach the other tests.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
from django.db import connection

from tests.api.helpers import failed_run
from tests.conftest import TEST_SOURCES, require_service
from tests.orchestrator.test_worker import database_url
from tests.services import app_env, manage, start_web

pytestmark = pytest.mark.slow

# Cases per operation: the API has about 20, and the suite runs on two cores.
CASES = 30


@dataclass
class LiveApi:
    url: str
    token: str
    log: Path

    def tracebacks(self) -> str:
        """The tracebacks the server logged (a 5xx's cause)."""
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return text[text.index("Traceback") :][-6000:] if "Traceback" in text else ""


@pytest.fixture(scope="module")
def live_api(django_db_setup, tmp_path_factory) -> Iterator[LiveApi]:
    require_service(connection.vendor == "postgresql", "PostgreSQL")
    url = database_url()  # the test database (per xdist worker): its name is ours to extend
    var = tmp_path_factory.mktemp("schemathesis")
    with own_database(url, "_schemathesis") as own:
        env = app_env(own, "redis://127.0.0.1:1/0", "", var) | {
            "API_RATE_LIMIT_PER_MINUTE": "0",
            "FAILSIGHT_SOURCE_MODULES": TEST_SOURCES,  # the workflows' sources, in process
        }
        manage(env, "migrate", "--noinput")
        token = manage(env, "createtoken", "schemathesis")
        server, base_url = start_web(env, var / "web.log", WEB_CONCURRENCY="1")
        try:
            yield LiveApi(base_url, token, var / "web.log")
        finally:
            server.stop()


@contextlib.contextmanager
def own_database(url: str, suffix: str) -> Iterator[str]:
    """An empty database named after `url`'s with `suffix`, on the same server; dropped after."""
    base, _, name = url.rpartition("/")
    name += suffix
    with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(f"{base}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def seed(api: LiveApi) -> dict[str, int]:
    """A failed run, its review item and a workflow, so that cases reach past the 404 of an
    unknown id: their ids are what schemathesis puts in half of the id parameters."""
    with httpx.Client(
        base_url=f"{api.url}/api/v1", headers={"Authorization": f"Bearer {api.token}"}, timeout=30
    ) as client:
        run = created(client.post("/runs", json=failed_run()))
        item = created(client.post("/reviews", json={"run": run, "reason": "seed"}))
        workflow = {"name": "seed", "topics": ["film"], "capability": "news"}
        workflow_id = created(client.post("/workflows", json=workflow))
    return {"runs": run, "items": item, "workflows": workflow_id}


def created(response: httpx.Response) -> int:
    assert response.status_code == 201, response.text
    return response.json()["id"]


ID_PARAMETERS = {
    "path.run_id": "runs",
    "body.run": "runs",
    "path.item_id": "items",
    "path.workflow_id": "workflows",
    "body.workflow": "workflows",
}


def config_file(ids: dict[str, int], folder: Path) -> Path:
    lines = [f"[dictionaries.{name}]\nvalues = [{value}]" for name, value in ids.items()]
    # The seeded item is open: a long poll on it would hold each case for its whole wait.
    lines.append('[parameters]\n"query.wait" = 0')
    lines += [
        f'"{key}" = {{ dictionary = "{name}", probability = 0.5 }}'
        for key, name in ID_PARAMETERS.items()
    ]
    path = folder / "schemathesis.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_no_operation_answers_a_server_error(live_api: LiveApi, tmp_path: Path) -> None:
    """schemathesis' own runner (its pytest loader drives private pytest attributes that pytest 9
    no longer has): the documented examples, the boundary cases of each schema and CASES
    generated cases per operation. A failure prints each 5xx with a command reproducing it."""
    command = [
        sys.executable, "-m", "schemathesis.cli",
        "--config-file", str(config_file(seed(live_api), tmp_path)),
        "run", f"{live_api.url}/api/v1/openapi.json",
        "--checks", "not_a_server_error",
        "--header", f"Authorization: Bearer {live_api.token}",
        "--phases", "examples,coverage,fuzzing",
        "--max-examples", str(CASES),
        "--workers", "2",
        "--suppress-health-check", "all",
        "--request-timeout", "30",
        "--generation-database", "none",
        "--no-color",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    summary = done.stdout[-8000:] + done.stderr[-2000:]
    assert done.returncode == 0, summary + live_api.tracebacks()
    print(summary[-1500:])
