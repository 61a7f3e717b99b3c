"""Regular expressions on the server run under RE2 (`google-re2`): linear time whatever the
pattern, so an operator's scrub pattern cannot stall ingest, and gitleaks' rules compile in the
Go syntax they are written in. Memory per expression is bounded: a pattern whose automaton
needs more is refused."""

from __future__ import annotations

import functools
from typing import Any, Final

import re2

from classifier.scrub import pattern_error

# RE2's own default (8 MiB) halved: enough for the rule set's largest expression, and what an
# operator's pattern may take.
MAX_MEMORY: Final = 4 << 20


def _options() -> Any:
    options = re2.Options()
    options.max_mem = MAX_MEMORY
    options.log_errors = False  # a refused pattern is reported to the operator, not to stderr
    return options


_OPTIONS: Final = _options()


@functools.lru_cache(maxsize=1024)
def compile_re2(pattern: str) -> Any:
    """`pattern` compiled by RE2 under the memory bound (raises `re2.error` if refused)."""
    return re2.compile(pattern, _OPTIONS)


def operator_pattern_error(pattern: str) -> str | None:
    """Return why RE2 refuses `pattern` as a scrub pattern (None if it takes it)."""
    return pattern_error(pattern, compile_re2)
