"""`message_category`: the patterns found left to right, and the first-listed one decides."""

from __future__ import annotations

import random

from classifier import rules
from classifier.taxonomy import FailureCategory

PATTERNS = [pattern for pattern, _ in rules.MESSAGE_PATTERNS]


def leftmost_scan(message: str) -> FailureCategory | None:
    """The reference, without a regex: from the left, the earliest position where a pattern
    starts takes the first-listed pattern starting there, and the scan resumes after it; of
    the patterns taken, the one listed first in MESSAGE_PATTERNS decides."""
    text = message[:500].lower()
    taken: list[int] = []
    position = 0
    while True:
        starts = [(text.find(p, position), i) for i, p in enumerate(PATTERNS)]
        starts = [(start, i) for start, i in starts if start >= 0]
        if not starts:
            break
        start, index = min(starts)
        taken.append(index)
        position = start + len(PATTERNS[index])
    return rules.MESSAGE_PATTERNS[min(taken)][1] if taken else None


def test_long_and_short_messages_read_as_the_leftmost_scan_reads_them() -> None:
    words = [*PATTERNS, "x", "ab", "t", "d", "e", "Error 111 connecting to 127.0.0.1:6390."]
    rnd = random.Random(7)
    for _ in range(20_000):
        parts = [rnd.choice(words)[rnd.randrange(0, 3) :] for _ in range(rnd.randrange(0, 9))]
        message = rnd.choice(["", " ", "  "]).join(parts)
        if rnd.random() < 0.3:
            message = message.upper()
        assert rules.message_category(message) == leftmost_scan(message), message


def test_a_match_that_hides_an_overlapping_one_still_decides() -> None:
    # "rate limit" consumes the "t" of "timeout": the scan never sees the timeout.
    message = "upstream answered: rate limitimeout, retry later please"
    assert rules.message_category(message) is FailureCategory.RATE_LIMITED
    assert leftmost_scan(message) is FailureCategory.RATE_LIMITED


def test_only_the_first_500_characters_are_read() -> None:
    assert rules.message_category("x" * 500 + "timed out") is None
    assert rules.message_category("x" * 491 + "timed out") is FailureCategory.TIMEOUT
