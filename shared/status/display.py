"""How figures read to people, and how stored values read as JSON (pure).

The CLI (``flexjobs status``, ``list``, ``watch``) and the status page show the same figures,
so they format them here, once.

Examples:
    >>> duration(3725), gpu_hours(5400), usd(1234.5), duration(None)
    ('1h02m', '1.500', '$1,234.50', '-')
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def jsonable(value: Any) -> Any:
    """A Firestore value as JSON: datetimes in RFC 3339 (UTC, ``Z``), bytes base64.

    Examples:
        >>> jsonable({"at": datetime(2026, 11, 30, 2, 0, tzinfo=UTC), "n": (1, 2)})
        {'at': '2026-11-30T02:00:00Z', 'n': [1, 2]}
    """
    if isinstance(value, datetime):
        when = value if value.tzinfo else value.replace(tzinfo=UTC)
        return when.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def duration(seconds: Any) -> str:
    """``1h02m``, ``3m05s``, ``12s``; ``-`` when unknown."""
    if not _number(seconds):
        return "-"
    total = int(max(seconds, 0))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def gpu_hours(seconds: Any) -> str:
    """GPU-seconds as GPU-hours, three decimals; ``-`` when unknown."""
    if not _number(seconds):
        return "-"
    return f"{seconds / 3600:.3f}"


def usd(value: Any) -> str:
    """``$1,234.50``; ``-`` when unknown."""
    if not _number(value):
        return "-"
    return f"${value:,.2f}"


def when(value: Any) -> str:
    """A time in UTC to the second (``2026-11-30 02:00:07Z``); ``-`` when unknown."""
    if not isinstance(value, datetime):
        return "-"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
