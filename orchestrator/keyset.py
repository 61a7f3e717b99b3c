"""Opaque cursors for keyset pagination over (created_at, id), shared by the API and dashboard.

A cursor is base64url of "<ISO timestamp>|<id>": opaque to clients (they only pass it back), yet
trivial to debug. Decoding refuses anything else with ValueError, which callers turn into a 422.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime


def encode_cursor(key: tuple[datetime, int]) -> str:
    created_at, pk = key
    raw = f"{created_at.isoformat()}|{pk}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    """Return the (created_at, id) key a cursor encodes; ValueError if it is not one of ours."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        stamp, pk = raw.split("|")
        created_at = datetime.fromisoformat(stamp)
        key = int(pk)
    except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
        raise ValueError("not a cursor from this API") from exc
    if created_at.tzinfo is None or not 1 <= key < 2**63:
        raise ValueError("not a cursor from this API")
    return created_at, key
