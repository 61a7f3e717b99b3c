"""The documentation a newcomer reads stays true to the code: every environment variable the
product reads is in docs/configuration.md's table (and nothing else is), and the README stays a
page that fits on a screen, whose links all lead somewhere."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("config", "classifier", "orchestrator", "insights", "dashboard", "demo")

# `env_int("NAME", …)` and its siblings in settings, `os.environ.get("NAME")`, `getenv("NAME")`,
# and `env("NAME", …)` where a command aliases `env = os.environ.get`.
READ_IN_PYTHON = re.compile(
    r"""(?:\benv(?:_\w+)?|os\.environ\.get|os\.getenv|os\.environ\[)\(?\s*["']([A-Z][A-Z0-9_]+)["']"""
)
# `${NAME:-default}` in the Procfile's lines.
READ_IN_PROCFILE = re.compile(r"\$\{([A-Z][A-Z0-9_]+)")
DOCUMENTED = re.compile(r"^\| `([A-Z][A-Z0-9_]+)`(?: / `([A-Z][A-Z0-9_]+)`)? \|", re.M)


def variables_read() -> set[str]:
    found = set(READ_IN_PROCFILE.findall((ROOT / "Procfile").read_text()))
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                found |= set(READ_IN_PYTHON.findall(path.read_text()))
    return found - {"DJANGO_SETTINGS_MODULE"}


def variables_documented() -> set[str]:
    table = (ROOT / "docs" / "configuration.md").read_text()
    return {name for pair in DOCUMENTED.findall(table) for name in pair if name}


def test_every_environment_variable_is_in_the_configuration_table() -> None:
    read = variables_read()
    assert "DATABASE_URL" in read and "BIND" in read  # the scan itself works
    assert sorted(read - variables_documented()) == []


def test_the_configuration_table_lists_no_variable_nothing_reads() -> None:
    assert sorted(variables_documented() - variables_read()) == []


def local_links(page: Path) -> list[Path]:
    """The files a Markdown page links to by a relative path (anchors and web links aside)."""
    targets = re.findall(r"\]\(((?!https?:|#)[^)#\s]+)", page.read_text())
    return [(page.parent / target).resolve() for target in targets]


def test_the_readme_fits_on_a_screen_and_links_the_docs() -> None:
    readme = ROOT / "README.md"
    assert len(readme.read_text().splitlines()) <= 300
    linked = {path.relative_to(ROOT).as_posix() for path in local_links(readme)}
    pages = ("configuration", "api", "deployment", "benchmarks", "operations", "sdk")
    assert {f"docs/{page}.md" for page in pages} <= linked


def test_every_link_of_the_readme_and_the_docs_leads_to_a_file() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = [
        f"{page.relative_to(ROOT)} -> {target.relative_to(ROOT)}"
        for page in pages
        for target in local_links(page)
        if not target.exists()
    ]
    assert broken == []
