"""The architecture as a test: the import-linter contracts of pyproject.toml all hold.

`dashboard → insights → orchestrator → classifier`, never back, and nothing imports the pages;
`classifier` imports nothing of ours (agents embed it); nothing in the product imports the `demo`
add-on; no import cycle between the rooms of `orchestrator`, at any depth. The README's
architecture section draws the same arrows.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRACTS = ("layers", "pages-on-top", "classifier-alone", "demo-add-on", "no-cycles")


def test_every_import_contract_holds() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint), "--no-cache", *[arg for c in CONTRACTS for arg in ("--contract", c)]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in result.stdout


def test_the_product_registers_no_source_of_its_own() -> None:
    """FAILSIGHT_SOURCE_MODULES is empty unless set: the demo's sources are `launch`'s to name."""
    code = (
        "import django, os; os.environ.pop('FAILSIGHT_SOURCE_MODULES', None); django.setup();"
        "from django.conf import settings;"
        "from orchestrator.coordination.registry import registry;"
        "print(settings.FAILSIGHT_SOURCE_MODULES, registry().sources)"
    )
    env = {"DJANGO_SETTINGS_MODULE": "config.settings", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[] {}"


def test_every_module_says_what_it_holds() -> None:
    """Each module of the product opens with a docstring (what lives there, what does not)."""
    import ast

    missing = []
    for package in ("classifier", "orchestrator", "insights", "dashboard", "demo", "config"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            if not ast.get_docstring(ast.parse(path.read_text())):
                missing.append(str(path.relative_to(ROOT)))
    assert missing == []


def test_no_module_cites_documents_outside_the_repository() -> None:
    """Comments explain in the code's own terms and point to our own docs, nothing beyond."""
    import re

    outside = re.compile(r"\.\./shared|\bthe brief\b|BRIEF\.md|the issue\b|issue #?\d", re.I)
    offenders = []
    roots = ("classifier", "orchestrator", "insights", "dashboard", "demo", "config", "benchmarks")
    roots += ("scripts",)
    for package in (*roots, "tests"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == Path(__file__):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if outside.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert offenders == []
