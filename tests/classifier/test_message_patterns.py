"""`message_category` answers as the single regex scan over MESSAGE_PATTERNS answers."""

from __future__ import annotations

import random

from classifier import rules
from classifier.taxonomy import FailureCategory


def by_regex_scan(message: str) -> FailureCategory | None:
    """The reference: every non-overlapping match of the scan, the first-listed pattern wins."""
    found = rules._ANY_MESSAGE_PATTERN.findall(message[:500].lower())
    if not found:
        return None
    return rules.MESSAGE_PATTERNS[min(rules._MESSAGE_PATTERN_INDEX[t] for t in found)][1]


def test_long_and_short_messages_read_as_the_regex_scan_reads_them() -> None:
    patterns = [pattern for pattern, _ in rules.MESSAGE_PATTERNS]
    words = [*patterns, "x", "ab", "t", "d", "e", "Error 111 connecting to 127.0.0.1:6390."]
    rnd = random.Random(7)
    for _ in range(20_000):
        parts = [rnd.choice(words)[rnd.randrange(0, 3) :] for _ in range(rnd.randrange(0, 9))]
        message = rnd.choice(["", " ", "  "]).join(parts)
        if rnd.random() < 0.3:
            message = message.upper()
        assert rules.message_category(message) == by_regex_scan(message), message


def test_a_match_that_hides_an_overlapping_one_still_decides() -> None:
    # "rate limit" consumes the "t" of "timeout": the scan never sees the timeout.
    message = "upstream answered: rate limitimeout, retry later please"
    assert rules.message_category(message) is FailureCategory.RATE_LIMITED
    assert rules.message_category(message) == by_regex_scan(message)
