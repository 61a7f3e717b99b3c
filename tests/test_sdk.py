"""The SDK distribution (sdk/pyproject.toml): installed alone into a fresh virtualenv, it gives an
agent the classifier and the client with no server package in sight."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CHECK = """
import importlib.metadata, importlib.util, sys

import classifier
import httpx
from orchestrator.client import AgentClient

server = ("django", "ninja", "celery", "psycopg", "orchestrator.models", "orchestrator.api")
assert [name for name in server if importlib.util.find_spec(name)] == [], "server code installed"
assert not {"django", "celery", "psycopg"} & set(sys.modules), "server code imported"
assert classifier.__file__.startswith(sys.prefix), classifier.__file__

# Besides its packages, the distribution's record lists the script it installs (../../../bin/…).
shipped = {f.parts[0] for f in importlib.metadata.files("failsight-sdk") if f.parts[0] != ".."}
assert shipped == {"classifier", "orchestrator", "failsight_sdk-0.1.0.dist-info"}, shipped
requires = importlib.metadata.requires("failsight-sdk")
assert requires == ["httpx<1,>=0.27", "mcp<3,>=2.3; extra == 'mcp'"], requires
scripts = importlib.metadata.entry_points(group="console_scripts", name="failsight-mcp")
assert [s.value for s in scripts] == ["orchestrator.client.mcp_stdio:main"], scripts

request = httpx.Request("GET", "https://api.example.com/search")
try:
    httpx.Response(429, headers={"Retry-After": "7"}, request=request).raise_for_status()
except httpx.HTTPStatusError as exc:
    failure = classifier.classify(exc)
print(failure.category, failure.retryable, failure.retry_after)

AgentClient("http://127.0.0.1:1", "a-token", strict=True, sync_policies=False).close()
"""


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_sdk_installs_alone_and_imports_the_client_and_classifier_without_django(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=120)
    python = venv / "bin" / "python"
    # Build isolation fetches the build backend from the package index, as `pip install ./sdk`
    # does for an agent; httpx comes from there too.
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", ROOT / "sdk"],
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert install.returncode == 0, install.stderr
    # -I: neither the checkout nor PYTHONPATH is on the path, only what was installed.
    result = subprocess.run(
        [python, "-I", "-c", CHECK], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["rate_limited", "True", "7.0"]
