"""The signature of a failure: which failures are "the same error", for grouping and review.

Two failures are the same when they come from the same source, have the same failure type and
the same detail once what varies between occurrences is taken out (addresses, ids, quoted ids,
numbers; a quoted phrase such as '503 Service Unavailable' stays, it says what went wrong).
The signature is computed once, when a failure is stored (`Run.record_outcome` and the API's
ingest write it on the run; an escalation copies it onto the review item), so the failure groups
page, the review queue's grouped view and "resolve all like this" all group by one value. Pure
functions, no Django: the models and the ingest path import this module, not the other way round.
"""

from __future__ import annotations

import hashlib
import re

from orchestrator.vocabulary import FailureCategory

# 32 hex digits (128 bits) of SHA-256: collisions are out of reach, and the key of the run
# table's signature index stays half the size of a full digest.
SIGNATURE_LENGTH = 32
PATTERN_LENGTH = 500

_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s'\"<>]+", re.I)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
_QUOTED = re.compile(r"'([^']*)'|\"([^\"]*)\"")
_HEX = re.compile(r"\b0x[0-9a-f]+\b", re.I)
_DIGITS = re.compile(r"\d+")


def _quoted(match: re.Match) -> str:
    """A quoted id ('a1b2c3', one token with a digit) varies; a quoted phrase ('503 Service
    Unavailable') says what went wrong and is kept, its numbers taken out with the rest."""
    inner = match.group(1) if match.group(1) is not None else match.group(2)
    if not inner.split() or (len(inner.split()) == 1 and any(c.isdigit() for c in inner)):
        return "<q>"
    return f"'{inner}'"


def normalise_detail(detail: str) -> str:
    """Strip what varies between two occurrences of the same error: addresses, ids, quoted
    values, numbers.

    Only the head of a long detail is read: what tells two errors apart comes first, and a
    megabyte of detail must not cost a megabyte of regular expressions on the ingest path.
    """
    text = _URL.sub("<url>", (detail or "")[: PATTERN_LENGTH * 4])
    text = _UUID.sub("<id>", text)
    text = _QUOTED.sub(_quoted, text)
    text = _HEX.sub("<n>", text)
    text = _DIGITS.sub("<n>", text)
    return " ".join(text.lower().split())[:PATTERN_LENGTH]


def signature(source: str, failure_type: str | None, detail: str) -> str:
    """Return the key that groups failures of the same error from the same source."""
    ftype = failure_type or FailureCategory.UNCLASSIFIED
    raw = f"{source}|{ftype}|{normalise_detail(detail)}"
    return hashlib.sha256(raw.encode()).hexdigest()[:SIGNATURE_LENGTH]
