"""The signature of a failure: which failures are "the same error", for grouping and review.

Same source, same failure type, same detail once what varies between occurrences (ids, addresses,
times, numbers, query strings) is replaced by a placeholder from `PARAMETERS`; words stay.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Callable
from typing import Final, NamedTuple

from orchestrator.vocabulary import FailureCategory

# 128 bits: collisions are out of reach, and the signature index's key is half a full digest.
SIGNATURE_LENGTH = 32
PATTERN_LENGTH = 500

# A parameter starts and ends at a token's edge: letters and digits continue a token, `_` and
# `-` do not, so `req_8f3ab2c1d9` and `span-00f067aa0ba902b7` expose their ids.
_EDGE = r"(?<![0-9a-z])"
_END = r"(?![0-9a-z])"


class Parameter(NamedTuple):
    name: str
    pattern: re.Pattern[str]
    placeholder: str | Callable[[re.Match[str]], str]
    # A character every match holds: a detail without it skips the pattern (the ingest path).
    telltale: str = ""


def _ipv6(match: re.Match[str]) -> str:
    """Only a valid address is one: `12:34:56` or `a:b:c` look alike and stay."""
    try:
        ipaddress.IPv6Address(match.group())
    except ValueError:
        return match.group()
    return "<ip>"


def _quoted(match: re.Match[str]) -> str:
    """A quoted id ('a1b2c3') varies; a quoted phrase ('503 Service Unavailable') is kept."""
    inner = match.group(1) if match.group(1) is not None else match.group(2)
    if not inner.split() or (len(inner.split()) == 1 and any(c.isdigit() for c in inner)):
        return "<q>"
    return f"'{inner}'"


# The most specific shape first, taken whole before the broader patterns could cut it up.
PARAMETERS: Final = (
    Parameter("query", re.compile(r"(?<=[^\s?])\?[\w.~%+\-\[\]]+=[^\s#'\"<>]*"), "?<query>", "?"),
    Parameter(
        "email",
        re.compile(r"(?<![\w.%+-])[\w.%+-]+@[a-z0-9-]+(?:\.[a-z0-9-]+)*\.[a-z]{2,}" + _END),
        "<email>",
        "@",
    ),
    Parameter(
        "uuid",
        re.compile(_EDGE + r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}" + _END),
        "<uuid>",
        "-",
    ),
    Parameter(
        "timestamp",
        re.compile(
            _EDGE + r"\d{4}-\d{2}-\d{2}"
            r"(?:[t ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:z|[+-]\d{2}(?::?\d{2})?)?)?" + _END
        ),
        "<ts>",
        "-",
    ),
    Parameter(
        "ipv6",
        re.compile(
            r"(?<![0-9a-z:.])(?:[0-9a-f]{0,4}:){2,7}"
            r"(?:[0-9a-f]{1,4}|(?:\d{1,3}\.){3}\d{1,3})?(?:%[0-9a-z]+)?(?![0-9a-z:])"
        ),
        _ipv6,
        ":",
    ),
    Parameter("ipv4", re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?![\d.])"), "<ip>", "."),
    # An id after a prefix (`req_8f3ab2c1d9`): the prefix says what it is, and stays.
    Parameter(
        "prefixed_id",
        re.compile(_EDGE + r"([a-z][a-z0-9]*_)(?:(?=[a-z]*\d)[0-9a-z]{6,}|[0-9a-f]{8,})" + _END),
        r"\1<id>",
        "_",
    ),
    # W3C trace and span ids whatever digits they drew, 0x addresses, digests.
    Parameter(
        "hex",
        re.compile(
            _EDGE + r"(?:[0-9a-f]{32}|[0-9a-f]{16}|0x[0-9a-f]+"
            r"|(?=[0-9]*[a-f])(?=[a-f]*\d)[0-9a-f]{8,})" + _END
        ),
        "<hex>",
    ),
    Parameter("quoted", re.compile(r"'([^']*)'|\"([^\"]*)\""), _quoted),
    Parameter("number", re.compile(r"\d+(?:\.\d+)?"), "<num>"),
)


def normalise_detail(detail: str) -> str:
    """Return the detail with its parameters replaced by placeholders, lowercased, its spaces
    collapsed; only the head of a long detail is read (the ingest path)."""
    text = (detail or "")[: PATTERN_LENGTH * 4].lower()
    for parameter in PARAMETERS:
        if parameter.telltale in text:
            text = parameter.pattern.sub(parameter.placeholder, text)
    return " ".join(text.split())[:PATTERN_LENGTH]


def signature(source: str, failure_type: str | None, detail: str) -> str:
    """Return the key that groups failures of the same error from the same source."""
    ftype = failure_type or FailureCategory.UNCLASSIFIED
    raw = f"{source}|{ftype}|{normalise_detail(detail)}"
    return hashlib.sha256(raw.encode()).hexdigest()[:SIGNATURE_LENGTH]
