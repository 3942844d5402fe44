"""Reading untrusted JSON for messages: type names and short, safe renderings of values."""

from __future__ import annotations

import json
import re
from typing import Any, Final

_SIMPLE_KEY: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


def kind_of(value: Any) -> str:
    """The JSON type name of ``value``, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def show(value: Any) -> str:
    """A short, safe rendering of a scalar for messages (never the whole of a huge value)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        # str() of an int with thousands of digits raises ValueError; never try it.
        return str(value) if -(10**15) < value < 10**15 else "a very large number"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        text = value if len(value) <= 60 else value[:57] + "..."
        return json.dumps(text)
    return kind_of(value)


def key_path(base: str, key: Any) -> str:
    """``base.key`` for a plain key, else ``base["key"]`` (quoted, cut to 60 characters)."""
    text = str(key) if isinstance(key, str) else show(key)
    return f"{base}.{text}" if _SIMPLE_KEY.fullmatch(text) else f"{base}[{json.dumps(text[:60])}]"
