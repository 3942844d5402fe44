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

from shared.domain.serving.model import HISTORY_LIMIT, CapacityStep


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


def serving_text(record: Mapping[str, Any]) -> str:
    """A deployment's serving capacity as the tick last recorded it (its ``serving`` map):
    available replicas (Spot plus on-demand) of those required, and the phase.

    Examples:
        >>> last = {"spot": 1, "onDemand": 0, "required": 2}
        >>> serving_text({"serving": {"last": last, "phase": "DEFICIT"}})
        '1/2 replicas (DEFICIT)'
        >>> serving_text({})
        '-'
    """
    serving = record.get("serving")
    last = serving.get("last") if isinstance(serving, Mapping) else None
    if not isinstance(last, Mapping):
        return "-"
    counts: list[Any] = [last.get(k) for k in ("spot", "onDemand", "required")]
    if not all(_number(c) for c in counts):
        return "-"
    spot, on_demand, required = (int(c) for c in counts)
    text = f"{spot + on_demand}/{required} replicas"
    if on_demand:
        text += f" ({spot} Spot, {on_demand} on-demand)"
    phase = serving.get("phase") if isinstance(serving, Mapping) else None
    # The phase is ours, but the record may be edited by hand: clipped.
    return f"{text} ({phase[:32]})" if isinstance(phase, str) and phase else text


def serving_changes(serving: Mapping[str, Any]) -> tuple[CapacityStep, ...]:
    """The recorded serving-capacity changes as stored (oldest first): at most the last
    :data:`HISTORY_LIMIT`, each read as the tick reads it (``CapacityStep.decode``: counts
    that are not counts read 0, a cause is clipped), one without a time left out. The map comes from
    Firestore and may be edited by hand: this never raises.

    Examples:
        >>> at = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
        >>> [c.capacity.spot for c in serving_changes({"history": [
        ...     {"at": at.isoformat(), "spot": 1}, {"at": "yesterday", "spot": 2}, "x"]})]
        [1]
    """
    history = serving.get("history")
    if not isinstance(history, list):
        return ()
    decoded = (CapacityStep.decode(item) for item in history[-HISTORY_LIMIT:])
    return tuple(change for change in decoded if change is not None)


def serving_history(serving: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """The recorded serving-capacity changes, newest first, as text: (when, Spot, on-demand,
    required, cause); see :func:`serving_changes`.

    Examples:
        >>> at = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
        >>> serving_history({"history": [
        ...     {"at": at.isoformat(), "spot": 1, "onDemand": 0, "required": 2, "cause": "x"}]})
        [('2026-12-01 10:00:00Z', '1', '0', '2', 'x')]
    """
    return [
        (
            when(change.at),
            str(change.capacity.spot),
            str(change.capacity.on_demand),
            str(change.capacity.required),
            change.cause,
        )
        for change in reversed(serving_changes(serving))
    ]
