"""The admission queues as people read them: the tick's summary (``admission/summary``,
:mod:`shared.domain.admission.summary`) in rows for the status page's queues view and
``flexjobs queues``, and a waiting request's place in words for its page and
``flexjobs status``. Reads only what the summary holds; a field that does not read shows as
missing, never fails the page (the summary is ours, but a hand edit must not break it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from shared.status.display import when


@dataclass(frozen=True)
class ResourceRow:
    """One queue's quota of one resource."""

    resource: str
    nominal: int | None
    used: int | None
    borrowed: int | None


@dataclass(frozen=True)
class WaitingRow:
    """One waiting request of a queue's line."""

    request_id: str
    position: int | None
    priority: int | None
    gpus: int | None
    waiting_since: datetime | None
    estimated_start: datetime | None


@dataclass(frozen=True)
class QueueRow:
    name: str
    cohort: str | None
    weight: float | None
    admitted: int | None
    waiting: int | None
    oldest_waiting_since: datetime | None
    resources: tuple[ResourceRow, ...]
    line: tuple[WaitingRow, ...]


@dataclass(frozen=True)
class LimitRow:
    resource: str
    limit: int | None
    source: str


@dataclass(frozen=True)
class Summary:
    """The summary, typed for display."""

    at: datetime | None
    queues: tuple[QueueRow, ...]
    limits: tuple[LimitRow, ...]
    unreadable: str | None


def queue_rows(summary: Mapping[str, Any]) -> Summary:
    """The summary document in rows.

    Examples:
        >>> s = queue_rows({"queues": [{"name": "a", "waiting": 2, "resources": [
        ...     {"region": "r", "acceleratorType": "G", "pool": "PREEMPTIBLE", "nominal": 4,
        ...      "used": 6, "borrowed": 2}], "line": [{"requestId": "x", "position": 1}]}]})
        >>> s.queues[0].resources[0], s.queues[0].line[0].request_id
        (ResourceRow(resource='G PREEMPTIBLE in r', nominal=4, used=6, borrowed=2), 'x')
    """
    queues = tuple(
        QueueRow(
            name=str(q.get("name") or "?"),
            cohort=_str(q.get("cohort")),
            weight=_number(q.get("weight")),
            admitted=_int(q.get("admitted")),
            waiting=_int(q.get("waiting")),
            oldest_waiting_since=_time(q.get("oldestWaitingSince")),
            resources=tuple(
                ResourceRow(
                    _resource(r),
                    _int(r.get("nominal")),
                    _int(r.get("used")),
                    _int(r.get("borrowed")),
                )
                for r in _maps(q.get("resources"))
            ),
            line=tuple(
                WaitingRow(
                    str(w.get("requestId") or "?"),
                    _int(w.get("position")),
                    _int(w.get("priority")),
                    _int(w.get("gpus")),
                    _time(w.get("waitingSince")),
                    _time(w.get("estimatedStart")),
                )
                for w in _maps(q.get("line"))
            ),
        )
        for q in _maps(summary.get("queues"))
    )
    limits = tuple(
        LimitRow(_resource(p), _int(p.get("limit")), str(p.get("source") or "?"))
        for p in _maps(summary.get("projectQuota"))
    )
    return Summary(_time(summary.get("at")), queues, limits, _str(summary.get("quotaUnreadable")))


def waiting_text(
    admission: Mapping[str, Any],
    place: Mapping[str, Any] | None,
    summary: Mapping[str, Any] | None,
) -> str:
    """A waiting request's place, in words: its queue, its position of how many, and its
    estimated start, as of the last tick.

    Examples:
        >>> waiting_text({"queue": "a"}, {"position": 2, "waiting": 5,
        ...     "estimatedStart": None}, {"at": None})
        'waiting in queue a: position 2 of 5; start not known yet (no running job in its way names estimatedRunSeconds)'
        >>> waiting_text({"queue": "a"}, None, None)
        'waiting in queue a (no position yet: the next tick places it)'
    """  # noqa: E501
    queue = admission.get("queue") or "?"
    if summary is None:
        return f"waiting in queue {queue} (no position yet: the next tick places it)"
    held = admission.get("heldBy")
    why = f"; waits for {held}" if isinstance(held, str) and held else ""
    if place is None:
        return f"waiting in queue {queue}: further back than the listed line{why}"
    start = _time(place.get("estimatedStart"))
    estimate = (
        f"estimated start {when(start)}"
        if start is not None
        else "start not known yet (no running job in its way names estimatedRunSeconds)"
    )
    total = place.get("waiting")
    of = f" of {total}" if isinstance(total, int) else ""
    as_of = _time(summary.get("at"))
    stamp = f" (as of {when(as_of)})" if as_of is not None else ""
    return f"waiting in queue {queue}: position {place.get('position')}{of}; {estimate}{why}{stamp}"


def _maps(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _resource(raw: Mapping[str, Any]) -> str:
    return f"{raw.get('acceleratorType')} {raw.get('pool')} in {raw.get('region')}"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _time(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) else None
