"""Read how long a provider asked us to wait, from response headers in every common form.
Here: `parse_retry_after` (public), the scan that picks the known rate-limit headers out of any
header map (`header_values`) and the parsing of their values (`delay_from_values`). Not here:
finding the headers on an exception or its response (`classifier.signals`) and deciding whether
a failure is retryable at all (`classifier.failure`), which also reads the `x-should-retry` value
this scan picks out.
"""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Final

# A delay longer than a day is not a retry for an agent run; capping (rather than dropping) keeps
# the meaning "not soon" without overflowing anyone's timer.
MAX_RETRY_AFTER: Final = 86_400.0

# Headers beyond this many are not read: a header map is small, a hostile one is not our problem.
MAX_HEADERS: Final = 256

# x-ratelimit-reset is an absolute epoch (GitHub, Twitter) when it is this large, else a delay.
EPOCH_SECONDS_FROM: Final = 1_000_000_000.0
EPOCH_MILLISECONDS_FROM: Final = 1_000_000_000_000.0

# Lowercased names this module reads (and x-should-retry, the OpenAI/Anthropic servers' own
# "retry this or not" flag, which `classifier.failure` reads as the provider's own say).
KNOWN_HEADERS: Final = frozenset(
    {
        "retry-after-ms",
        "x-ms-retry-after-ms",
        "retry-after",
        "ratelimit-reset",
        "x-ratelimit-reset",
        "x-ratelimit-reset-requests",
        "x-ratelimit-reset-tokens",
        "x-should-retry",
    }
)

_NUMBER = re.compile(r"\+?\d{1,20}(?:\.\d{1,9})?")
_DURATION = re.compile(r"(?:\d{1,12}(?:\.\d{1,9})?(?:ms|us|µs|ns|h|m|s))+")
_DURATION_PART = re.compile(r"(\d{1,12}(?:\.\d{1,9})?)(ms|us|µs|ns|h|m|s)")
_UNIT_SECONDS: Final = {
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 1e-3,
    "us": 1e-6,
    "µs": 1e-6,
    "ns": 1e-9,
}


def parse_retry_after(headers: Any, now: float | datetime | None = None) -> float | None:
    """Return the seconds to wait before retrying, from `headers`, or None if they do not say.

    `headers` is any Mapping (dict, httpx.Headers, requests' CaseInsensitiveDict, aiohttp's
    CIMultiDictProxy), an `email.message.Message`, anything with `.items()`, or a list of
    (name, value) pairs; names are case-insensitive, values may be str, bytes or numbers.
    `now` (epoch seconds or a datetime; naive means UTC) replaces the clock for absolute forms.

    Precedence, first header that parses wins (garbage in one falls through to the next):
    1. `retry-after-ms` / `x-ms-retry-after-ms`: milliseconds (the most precise form);
    2. `Retry-After`: delay-seconds (int, or a float, which some servers send) or an HTTP-date
       (RFC 9110 section 10.2.3);
    3. `RateLimit-Reset`: delay-seconds (IETF draft ratelimit headers);
    4. `X-RateLimit-Reset`: epoch seconds when >= 1e9, epoch milliseconds when >= 1e12, else
       delay-seconds; a duration string ("6m0s") is accepted too;
    5. `x-ratelimit-reset-requests` / `x-ratelimit-reset-tokens` (OpenAI): duration strings such
       as "6m0s", "1.5s", "20ms", "1h2m3s"; when both are present the longer wins, since we cannot
       tell which limit we hit and a retry storm is worse than a late retry.

    A time in the past gives 0.0. Negative delays, NaN, infinity and unparsable values are
    garbage and give None. Delays above one day are capped at MAX_RETRY_AFTER. Never raises.
    """
    try:
        return delay_from_values(header_values(headers), now)
    except Exception:
        return None


def header_values(headers: Any) -> dict[str, Any]:
    """Return the values of the KNOWN_HEADERS in `headers`, keyed by lowercased name.

    The first occurrence of a name wins, and at most MAX_HEADERS names are looked at. A map is
    scanned through its names (`.keys()`), and only the values of known names are fetched
    through `[]`, which is how each library answers for a name (httpx joins repeated headers,
    an email Message gives the first); anything else is read as (name, value) pairs. An
    unreadable map gives what was read before it failed.
    """
    found: dict[str, Any] = {}
    if headers is None:
        return found
    try:
        if callable(getattr(headers, "keys", None)) and hasattr(headers, "__getitem__"):
            for count, key in enumerate(headers.keys()):
                if count >= MAX_HEADERS:
                    break
                # Most names are plain strings: lowercased here, without a call per name.
                name = str.lower(key) if type(key) is str else _name(key)
                if name in KNOWN_HEADERS and name not in found:
                    found[name] = headers[key]
        else:
            _scan_pairs(_items(headers), found)
    except Exception:
        pass
    return found


def _scan_pairs(pairs: Any, found: dict[str, Any]) -> None:
    """Add the known headers among (name, value) `pairs` to `found`."""
    for count, (key, value) in enumerate(pairs):
        if count >= MAX_HEADERS:
            break
        name = _name(key)
        if name in KNOWN_HEADERS and name not in found:
            found[name] = value


def _items(headers: Any) -> Any:
    """Return an iterable of (name, value) pairs for a mapping-like object or a list of pairs."""
    items = getattr(headers, "items", None)
    if callable(items):
        return items()
    if isinstance(headers, list | tuple):
        return headers
    return ()


def _name(key: Any) -> str | None:
    """Return a header name lowercased, or None if it is neither str nor bytes."""
    if isinstance(key, str):
        return str.lower(key)  # a str subclass's own lower() is not ours to call
    if isinstance(key, bytes):
        return key.decode("latin-1").lower()
    return None


def delay_from_values(found: dict[str, Any], now: float | datetime | None = None) -> float | None:
    """Return the delay the known header values in `found` ask for, by the documented precedence."""
    if not found:
        return None
    for name in ("retry-after-ms", "x-ms-retry-after-ms"):
        if name in found:
            milliseconds = _number(found[name])
            if milliseconds is not None:
                return _cap(milliseconds / 1000.0)
    if "retry-after" in found:
        delay = _retry_after(found["retry-after"], now)
        if delay is not None:
            return delay
    if "ratelimit-reset" in found:
        seconds = _number(found["ratelimit-reset"])
        if seconds is not None:
            return _cap(seconds)
    if "x-ratelimit-reset" in found:
        delay = _reset(found["x-ratelimit-reset"], now)
        if delay is not None:
            return delay
    durations = [
        _duration(found.get(name))
        for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")
    ]
    known = [d for d in durations if d is not None]
    return _cap(max(known)) if known else None


def _retry_after(value: Any, now: float | datetime | None) -> float | None:
    """Return the delay of a Retry-After value: delay-seconds or an HTTP-date."""
    seconds = _number(value)
    if seconds is not None:
        return _cap(seconds)
    text = _text(value)
    if text is None or not text or len(text) > 64:
        return None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return _cap(max(0.0, when.timestamp() - _now(now)))


def _reset(value: Any, now: float | datetime | None) -> float | None:
    """Return the delay of an X-RateLimit-Reset value: an epoch, a delay or a duration string."""
    number = _number(value)
    if number is None:
        duration = _duration(value)
        return None if duration is None else _cap(duration)
    if number >= EPOCH_MILLISECONDS_FROM:
        return _cap(max(0.0, number / 1000.0 - _now(now)))
    if number >= EPOCH_SECONDS_FROM:
        return _cap(max(0.0, number - _now(now)))
    return _cap(number)


def _duration(value: Any) -> float | None:
    """Return the seconds of a Go-style duration ("6m0s", "1.5s", "20ms") or a plain number."""
    number = _number(value)
    if number is not None:
        return number
    text = _text(value)
    if text is None or len(text) > 64 or not _DURATION.fullmatch(text):
        return None
    return sum(float(amount) * _UNIT_SECONDS[unit] for amount, unit in _DURATION_PART.findall(text))


def _number(value: Any) -> float | None:
    """Return `value` as a finite non-negative float if it is a plain decimal number, else None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            number = float(value)
        except (OverflowError, ValueError):
            return None
    else:
        text = _text(value)
        if text is None or not _NUMBER.fullmatch(text):
            return None
        number = float(text)
    if math.isnan(number) or number < 0.0:
        return None
    return number


def _text(value: Any) -> str | None:
    """Return a header value as stripped text, or None if it is neither str nor bytes."""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if isinstance(value, str):
        return str.strip(value)
    return None


def _cap(seconds: float) -> float:
    """Return `seconds` bounded by MAX_RETRY_AFTER (infinity included)."""
    return min(float(seconds), MAX_RETRY_AFTER)


def _now(now: float | datetime | None) -> float:
    """Return `now` as epoch seconds: the clock when None, a naive datetime counted as UTC."""
    if now is None:
        return time.time()
    if isinstance(now, datetime):
        return (now if now.tzinfo is not None else now.replace(tzinfo=UTC)).timestamp()
    return float(now)
