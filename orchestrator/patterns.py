"""Regular expressions on the server run under RE2 (`google-re2`): linear time whatever the
pattern, so an operator's scrub pattern cannot stall ingest, and gitleaks' rules compile in the
Go syntax they are written in. Memory per expression is bounded: a pattern whose automaton
needs more is refused."""

from __future__ import annotations

import functools
from collections.abc import Callable
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
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, _OPTIONS)


def _set_options() -> Any:
    options = _options()
    options.max_mem = SET_MEMORY
    return options


# The rule set's expressions as one RE2 set: its automaton is larger than one expression's.
SET_MEMORY: Final = 64 << 20


class RE2:
    """The server's engine for `classifier.token_rules`: `engine(pattern)` compiles one pattern
    under the memory bound (raises `re2.error` if refused); `engine.matcher(patterns)` returns
    one pass over a text naming the patterns that match somewhere in it (None for none)."""

    def __call__(self, pattern: str) -> Any:
        return _compiled(pattern)

    def matcher(self, patterns: list[str]) -> Callable[[str], list[int] | None]:
        found = re2.Set.SearchSet(_set_options())
        for pattern in patterns:
            found.Add(pattern)
        found.Compile()
        return found.Match


compile_re2: Final = RE2()


def operator_pattern_error(pattern: str) -> str | None:
    """Return why RE2 refuses `pattern` as a scrub pattern (None if it takes it)."""
    return pattern_error(pattern, compile_re2)
