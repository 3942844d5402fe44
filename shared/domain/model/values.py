"""Reading untrusted JSON: integer checks, type names and short, safe renderings of values."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any, Final

_SIMPLE_KEY: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")


#: ASCII digits only (``str.isdigit`` also takes "²", which ``int`` then refuses).
DIGITS: Final = re.compile(r"[0-9]+")


def parse_rfc3339(raw: object) -> datetime | None:
    """An RFC 3339 time in UTC, or None when ``raw`` is not one (or names no offset).

    Pub/Sub and Cloud Storage write nanoseconds; Python reads at most microseconds.

    Examples:
        >>> parse_rfc3339("2026-11-30T02:00:07.123456789Z").isoformat()
        '2026-11-30T02:00:07.123456+00:00'
        >>> parse_rfc3339("2026-11-30T02:00:07") is None
        True
    """
    if not isinstance(raw, str):
        return None
    text = raw.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    head, dot, rest = text.partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = f"{head}.{rest[:digits][:6].ljust(6, '0')}{rest[digits:]}"
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when.astimezone(UTC) if when.utcoffset() is not None else None


#: How far ahead of this clock an object's Custom-Time may be and still be taken (clocks of
#: writers differ by seconds; minutes ahead is a time someone chose).
CUSTOM_TIME_SKEW_SECONDS: Final = 300.0


def object_time(
    custom: datetime | None, updated: datetime | None, created: datetime | None, now: datetime
) -> datetime | None:
    """When a request file was written, standing for its publish time: its Custom-Time when
    the writer set one within bounds, else its update time, else its creation.

    Custom-Time is whatever the writer chose, so it is taken only between the object's
    creation (a file dated 2020 would pass as a request published then, and an AUTO deadline
    in 2020 with it) and a few minutes past now (a future one would skip the deadline's
    30-day bound). A checkpoint's Custom-Time is another matter: it says when the checkpoint
    was taken, before a copy created the object, and is read as the writer set it.

    Examples:
        >>> t = datetime(2026, 12, 1, 12, tzinfo=UTC)
        >>> old = datetime(2020, 1, 1, tzinfo=UTC)
        >>> object_time(old, t, t, t) == t
        True
        >>> object_time(datetime(2027, 1, 1, tzinfo=UTC), t, t, t) == t
        True
    """
    fallback = updated or created
    if custom is None:
        return fallback
    ahead = (custom - now).total_seconds() > CUSTOM_TIME_SKEW_SECONDS
    early = created is not None and custom < created
    return fallback if ahead or early else custom


def snake_case(name: str) -> str:
    """The proto field name of a camelCase JSON name, as the proto3 JSON parser also takes it.

    Examples:
        >>> snake_case("trialJobSpec")
        'trial_job_spec'
    """
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def is_int(value: Any) -> bool:
    """True for a JSON integer; JSON booleans arrive as Python bools, which are not counts.

    Examples:
        >>> is_int(3), is_int(True), is_int(3.0)
        (True, False, False)
    """
    return isinstance(value, int) and not isinstance(value, bool)


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


#: Text from outside (a Vertex error message, an exception) is stored at most this long.
MAX_TEXT = 1024


def clip(text: str | None, limit: int = MAX_TEXT) -> str | None:
    """``text`` cut to ``limit`` characters, so whatever Vertex says stays bounded when stored.

    Examples:
        >>> clip("x" * 2000)[-5:], len(clip("x" * 2000))
        ('x...', 1024)
    """
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 3] + "..."


def copy_json(value: Any) -> Any:
    """A deep copy of JSON data: new dicts and lists all the way down, the leaves (strings,
    numbers, booleans, None: immutable) shared.

    What ``copy.deepcopy`` gives for a parsed body, at a fraction of its cost: it keeps no
    memo of shared objects, which JSON text cannot express, and asks no copier per type.

    Examples:
        >>> body = {"pools": [{"env": [{"name": "A"}]}], "n": 1}
        >>> copied = copy_json(body)
        >>> copied == body, copied["pools"][0] is body["pools"][0]
        (True, False)
    """
    if isinstance(value, dict):
        return {key: copy_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copy_json(item) for item in value]
    return value
