"""The classifier is pure: standard library only, in its imports and at run time."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import classifier

PACKAGE = Path(classifier.__file__).parent


def test_importing_and_using_the_classifier_loads_no_third_party_module() -> None:
    script = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "import classifier, classifier.envelope, classifier.described\n"
        "classifier.classify(TimeoutError('t'))\n"
        "classifier.parse_retry_after({'Retry-After': 'Wed, 21 Oct 2015 07:28:00 GMT'})\n"
        "classifier.envelope.error_envelope(ConnectionResetError())\n"
        "classifier.described.classify_description({'status_code': 429})\n"
        "import classifier.scrub\n"
        "classifier.scrub.Scrubber().scrub({'api_key': 'k', 'd': 'Authorization: Bearer x'})\n"
        "loaded = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "foreign = sorted(loaded - set(sys.stdlib_module_names) - {'classifier'})\n"
        "print(','.join(foreign))\n"
    )
    result = subprocess.run(
        [sys.executable, "-E", "-c", script],
        cwd=PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert result.stdout.strip() == ""


def test_no_module_imports_anything_but_the_standard_library() -> None:
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or top == "classifier", (path.name, name)
