"""The signature of a failure: which failures are "the same error", for grouping and review.

Two failures are the same when they come from the same source, have the same failure type and
the same detail once its parameters are taken out: what varies between occurrences of one error
(ids, addresses, times, numbers, query strings) is replaced by a placeholder from `PARAMETERS`,
while words stay (a quoted phrase such as '503 Service Unavailable' says what went wrong). The
signature is computed once, when a failure is stored (`Run.record_outcome` and the API's ingest
write it on the run; an escalation copies it onto the review item), so the failure groups page,
the review queue's grouped view and "resolve all like this" all group by one value. Pure
functions, no Django: the models and the ingest path import this module, not the other way round.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Callable
from typing import Final, NamedTuple

from orchestrator.vocabulary import FailureCategory

# 32 hex digits (128 bits) of SHA-256: collisions are out of reach, and the key of the run
# table's signature index stays half the size of a full digest.
SIGNATURE_LENGTH = 32
PATTERN_LENGTH = 500

# A parameter starts and ends at a token's edge: letters and digits continue a token, `_` and
# `-` do not, so `req_8f3ab2c1d9` and `span-00f067aa0ba902b7` expose their ids.
_EDGE = r"(?<![0-9a-z])"
_END = r"(?![0-9a-z])"


class Parameter(NamedTuple):
    """One kind of value that varies between occurrences of an error, and what replaces it."""

    name: str
    pattern: re.Pattern[str]
    placeholder: str | Callable[[re.Match[str]], str]
    # A character every match holds: a detail without it skips the pattern at the cost of a
    # substring test, which keeps the ingest path's signature cheap.
    telltale: str = ""


def _ipv6(match: re.Match[str]) -> str:
    """Only a valid address is one: `12:34:56` or `a:b:c` look alike and stay."""
    try:
        ipaddress.IPv6Address(match.group())
    except ValueError:
        return match.group()
    return "<ip>"


def _quoted(match: re.Match[str]) -> str:
    """A quoted id ('a1b2c3', one token with a digit) varies; a quoted phrase ('503 Service
    Unavailable') says what went wrong and is kept, its numbers taken out with the rest."""
    inner = match.group(1) if match.group(1) is not None else match.group(2)
    if not inner.split() or (len(inner.split()) == 1 and any(c.isdigit() for c in inner)):
        return "<q>"
    return f"'{inner}'"


# Applied in this order to the lowercased detail, the most specific shape first: an e-mail
# address or a timestamp holds numbers, a uuid holds hex, so each is taken whole before the
# broader patterns could cut it into pieces.
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
    # ISO 8601 dates, alone or with a time of day, fractions and an offset.
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
    # An id after a prefix (`req_8f3ab2c1d9`, `ch_3mtwbwlkdiwhu7ix`): six or more letters and
    # digits with a digit among them, or eight or more hex digits; the prefix says what it is.
    Parameter(
        "prefixed_id",
        re.compile(_EDGE + r"([a-z][a-z0-9]*_)(?:(?=[a-z]*\d)[0-9a-z]{6,}|[0-9a-f]{8,})" + _END),
        r"\1<id>",
        "_",
    ),
    # W3C trace ids (32 hex digits) and span ids (16) whatever digits they drew; 0x addresses;
    # other hex runs (digests, object ids) of eight or more that mix letters and digits.
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
    collapsed.

    Only the head of a long detail is read: what tells two errors apart comes first, and a
    megabyte of detail must not cost a megabyte of regular expressions on the ingest path.
    """
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
