"""The bounds every report's values are held to before they are stored: text PostgreSQL can keep."""

from __future__ import annotations

from typing import Any


def replace_nul(value: Any) -> Any:
    """`value` with every U+0000 in its strings and keys replaced by U+FFFD."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, list):
        return [replace_nul(item) for item in value]
    if isinstance(value, dict):
        return {replace_nul(key): replace_nul(item) for key, item in value.items()}
    return value
