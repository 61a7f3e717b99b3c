"""Read how long a provider asked us to wait, from response headers in every common form."""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Final

# Capped rather than dropped: keeps "not soon" without overflowing anyone's timer.
MAX_RETRY_AFTER: Final = 86_400.0

MAX_HEADERS: Final = 256

# x-ratelimit-reset is an absolute epoch (GitHub, Twitter) when it is this large, else a delay.
EPOCH_SECONDS_FROM: Final = 1_000_000_000.0
EPOCH_MILLISECONDS_FROM: Final = 1_000_000_000_000.0

# x-should-retry is the OpenAI/Anthropic servers' own say, read by `classifier.failure`.
KNOWN_HEADERS: Final = frozenset(
    {
        "retry-after-ms",
        "x-ms-retry-after-ms",
        "retry-after",
        "ratelimit-reset",
        "ratelimit",
        "x-ratelimit-reset",
        "x-ratelimit-reset-requests",
        "x-ratelimit-reset-tokens",
        "x-should-retry",
    }
)

# Bodies larger than this are not parsed for a delay.
MAX_BODY: Final = 65_536
MAX_DETAILS: Final = 32

# The IETF RateLimit field's parameters: r/t (draft-ietf-httpapi-ratelimit-headers-08 on,
# `"default";r=0;t=50`) and remaining/reset (earlier drafts, `limit=100, remaining=0, reset=50`).
_RATELIMIT_PARAMETER = re.compile(r"(?:^|[;,\s])(r|t|remaining|reset)=(\d{1,12}(?:\.\d{1,9})?)")
# A JSON body's own delay fields, milliseconds first (as the headers).
BODY_DELAY_FIELDS: Final = (
    (("retry_after_ms", "retryAfterMs"), 1e-3),
    (("retry_after", "retryAfter", "retry_after_seconds", "retryAfterSeconds"), 1.0),
)
RETRY_INFO_TYPE: Final = "google.rpc.RetryInfo"

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

    `headers` is any mapping, an email Message, or (name, value) pairs; `now` replaces the clock
    for absolute forms. The first header that parses wins: retry-after-ms, Retry-After (seconds
    or an HTTP-date), RateLimit-Reset, the IETF RateLimit field (the reset of an exhausted
    policy), X-RateLimit-Reset (an epoch when large), then OpenAI's
    x-ratelimit-reset-requests/-tokens, the longer of the two. Never raises.
    """
    try:
        return delay_from_values(header_values(headers), now)
    except Exception:
        return None


def header_values(headers: Any) -> dict[str, Any]:
    """Return the values of the KNOWN_HEADERS in `headers`, keyed by lowercased name.

    Values are fetched through `[]`, which is how each library answers for a repeated name.
    """
    found: dict[str, Any] = {}
    if headers is None:
        return found
    try:
        if callable(getattr(headers, "keys", None)) and hasattr(headers, "__getitem__"):
            for count, key in enumerate(headers.keys()):
                if count >= MAX_HEADERS:
                    break
                name = str.lower(key) if type(key) is str else _name(key)
                if name in KNOWN_HEADERS and name not in found:
                    found[name] = headers[key]
        else:
            _scan_pairs(_items(headers), found)
    except Exception:
        pass
    return found


def _scan_pairs(pairs: Any, found: dict[str, Any]) -> None:
    for count, (key, value) in enumerate(pairs):
        if count >= MAX_HEADERS:
            break
        name = _name(key)
        if name in KNOWN_HEADERS and name not in found:
            found[name] = value


def _items(headers: Any) -> Any:
    items = getattr(headers, "items", None)
    if callable(items):
        return items()
    if isinstance(headers, list | tuple):
        return headers
    return ()


def _name(key: Any) -> str | None:
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
    if "ratelimit" in found:
        delay = _ratelimit_field(found["ratelimit"])
        if delay is not None:
            return delay
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


def _ratelimit_field(value: Any) -> float | None:
    """Return the longest reset among the exhausted policies (r=0, or saying nothing of what
    remains) of a RateLimit field, or None."""
    text = _text(value)
    if text is None or len(text) > 1024:
        return None
    # The current drafts list one quoted policy per item; the earlier ones hold one policy.
    items = text.split(",") if '"' in text else [text]
    exhausted = []
    for item in items[:MAX_HEADERS]:
        params = dict(_RATELIMIT_PARAMETER.findall(item))
        reset = params.get("t", params.get("reset"))
        remaining = params.get("r", params.get("remaining"))
        if reset is not None and (remaining is None or float(remaining) == 0):
            exhausted.append(float(reset))
    return _cap(max(exhausted)) if exhausted else None


def delay_from_body(body: Any) -> float | None:
    """Return the delay an error body asks for, or None: `retry_after_ms`, `retry_after` (or
    camelCase) at its top level or under `error`, else a google.rpc RetryInfo among its
    `details`. `body` is parsed JSON, or JSON text of at most MAX_BODY. Never raises."""
    try:
        return _body_delay(_parsed(body))
    except Exception:
        return None


def _parsed(body: Any) -> Any:
    if isinstance(body, bytes | bytearray):
        if len(body) > MAX_BODY:
            return None
        body = bytes(body).decode("utf-8", "replace")
    if isinstance(body, str):
        text = body.strip()
        if len(text) > MAX_BODY or not text.startswith("{"):
            return None
        return json.loads(text)
    return body


def _body_delay(data: Any) -> float | None:
    if not isinstance(data, Mapping):
        return None
    error = data.get("error")
    for layer in (data, error) if isinstance(error, Mapping) else (data,):
        for names, scale in BODY_DELAY_FIELDS:
            for name in names:
                seconds = _number(layer.get(name))
                if seconds is not None:
                    return _cap(seconds * scale)
        delay = retry_info_delay(layer.get("details"))
        if delay is not None:
            return delay
    return None


def retry_info_delay(details: Any) -> float | None:
    """Return the retryDelay of the google.rpc RetryInfo among error `details` (JSON objects, or
    the protobuf messages google-api-core unpacks from a gRPC status), or None."""
    if not isinstance(details, list | tuple):
        return None
    for detail in details[:MAX_DETAILS]:
        if isinstance(detail, Mapping):
            kind = detail.get("@type")
            if isinstance(kind, str) and kind.endswith(RETRY_INFO_TYPE):
                return _duration_value(detail.get("retryDelay", detail.get("retry_delay")))
        elif type(detail).__name__ == "RetryInfo":
            return _duration_value(getattr(detail, "retry_delay", None))
    return None


def _duration_value(value: Any) -> float | None:
    """Seconds of a protobuf Duration: its JSON form ("30s", "1.5s"), a message with seconds and
    nanos, or a timedelta (as proto-plus gives it)."""
    if isinstance(value, str):
        text = value.strip()
        seconds = _number(text[:-1]) if text.endswith("s") else None
        return None if seconds is None else _cap(seconds)
    total_seconds = getattr(value, "total_seconds", None)
    if callable(total_seconds):
        return _cap(max(0.0, float(total_seconds())))
    seconds, nanos = getattr(value, "seconds", None), getattr(value, "nanos", 0)
    if isinstance(seconds, int) and isinstance(nanos, int) and seconds >= 0 and nanos >= 0:
        return _cap(seconds + nanos / 1e9)
    return None


def _retry_after(value: Any, now: float | datetime | None) -> float | None:
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
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if isinstance(value, str):
        return str.strip(value)
    return None


def _cap(seconds: float) -> float:
    return min(float(seconds), MAX_RETRY_AFTER)


def _now(now: float | datetime | None) -> float:
    if now is None:
        return time.time()
    if isinstance(now, datetime):
        return (now if now.tzinfo is not None else now.replace(tzinfo=UTC)).timestamp()
    return float(now)
